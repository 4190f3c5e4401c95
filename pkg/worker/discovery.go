package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/subjects"
)

// Discovery contract: every runtime registers one NATS micro service, so the
// standard `nats micro ls|info|stats` commands show the workers of a mesh.
const (
	// ServiceName is the micro service name every worker runtime registers.
	ServiceName = "utpmesh-worker"
	// DefaultServiceVersion is the micro service version when
	// Config.ServiceVersion is empty. micro requires semantic versions.
	DefaultServiceVersion = "0.0.0-dev"
	// DescribeService is the svc service token of the endpoints' subjects:
	// cg.<ver>.<project>.<channel>.svc.worker.<endpoint name>.
	DescribeService = "worker"
	// describeTimeout bounds one describe request's registry lookup.
	describeTimeout = 10 * time.Second
)

// Keys of the service and endpoint metadata.
const (
	MetaInstance        = "instance"
	MetaProtocolVersion = "protocol_version"
	MetaProjects        = "projects"
	MetaTool            = "tool"
	MetaConsumer        = "consumer"
	MetaFilterSubject   = "filter_subject"
	// MetaStats (on the service and on every endpoint) holds StatsNote.
	MetaStats = "stats"
)

// StatsNote explains, in the INFO metadata that `nats micro info` shows,
// why an endpoint's Requests stay 0 while its tool is called. micro (nats.go
// v1.55) counts num_requests/num_errors only for requests on the endpoint's
// own subscription, in fields it offers no way to feed, and tool calls never
// arrive there: they come through JetStream. The per-tool call counters are
// therefore the STATS data (ToolStats).
const StatsNote = "num_requests/num_errors count describe requests only; tool calls arrive through JetStream and are counted in each endpoint's STATS data: calls, failed, in_flight, redelivered, claim_takeovers"

var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$`)

// EndpointName is the micro endpoint name of a tool: the tool name, except
// that a name with dots (which micro does not allow) is rewritten the way
// its consumer name is (dots become "_" and "_<8 hex of SHA-256>" is
// appended). The endpoint metadata "tool" always holds the exact name.
func EndpointName(tool string) string {
	return strings.TrimPrefix(streams.ToolConsumer(tool), "utp_tool_")
}

// DescribeReply is the success reply of a describe request.
type DescribeReply struct {
	// Instance is the worker instance that answered.
	Instance string `json:"instance"`
	// Entry is the registry entry the worker validates calls of the tool
	// against in the request's project.
	Entry *registry.Entry `json:"entry"`
}

// startDiscovery registers the runtime's micro service with one endpoint per
// served tool. consumers maps tool name → (consumer, filter).
func (r *Runtime) startDiscovery(consumers map[string][2]string) error {
	ver := r.cfg.ProtocolVersion
	svc, err := micro.AddService(r.nc, micro.Config{
		Name:        ServiceName,
		Version:     r.cfg.ServiceVersion,
		Description: "utpmesh tool worker: one endpoint per served tool; STATS data holds its call counters",
		Metadata: map[string]string{
			MetaInstance:        r.cfg.InstanceID,
			MetaProtocolVersion: ver,
			MetaProjects:        strings.Join(r.cfg.Projects, ","),
			MetaStats:           StatsNote,
		},
		StatsHandler: func(e *micro.Endpoint) any {
			if s := r.statsOf(e.Metadata[MetaTool]); s != nil {
				return s.snapshot()
			}
			return ToolStats{}
		},
	})
	if err != nil {
		return fmt.Errorf("worker: register micro service %s: %w", ServiceName, err)
	}
	names := make([]string, 0, len(consumers))
	for name := range consumers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t := r.tools[name]
		if t == nil {
			t = r.pmo[name]
		}
		ep := EndpointName(name)
		subj, err := subjects.ServiceOpPattern(ver, DescribeService, ep)
		if err != nil {
			_ = svc.Stop()
			return fmt.Errorf("worker: describe endpoint of %s: %w", name, err)
		}
		c := consumers[name]
		err = svc.AddEndpoint(ep, micro.HandlerFunc(func(req micro.Request) { r.describe(t, req) }),
			micro.WithEndpointSubject(subj),
			micro.WithEndpointMetadata(map[string]string{MetaTool: name, MetaConsumer: c[0], MetaFilterSubject: c[1], MetaStats: StatsNote}))
		if err != nil {
			_ = svc.Stop()
			return fmt.Errorf("worker: micro endpoint for tool %s: %w", name, err)
		}
	}
	rsub, err := r.startRefresh(ver, svc.Info().ID)
	if err != nil {
		_ = svc.Stop()
		return err
	}
	r.mu.Lock()
	r.micro, r.refreshSub = svc, rsub
	r.mu.Unlock()
	return nil
}

// describe answers a describe request with the registry entry of t in the
// request subject's project. Errors use the svc envelope (docs/protocol.md
// §11.1) and micro's error headers, so `nats micro stats` counts them.
func (r *Runtime) describe(t *Tool, req micro.Request) {
	s, err := subjects.Parse(req.Subject())
	if err != nil {
		r.describeError(req, "bad_request", "subject: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.baseCtx, describeTimeout)
	defer cancel()
	e, err := r.entries.get(ctx, r.cfg.Registry, t, s.Project)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		r.describeError(req, "not_found", fmt.Sprintf("tool %s is not registered in project %s", t.Name, s.Project))
		return
	case err != nil:
		r.describeError(req, "unavailable", fmt.Sprintf("registry lookup of %s in project %s: %v", t.Name, s.Project, err))
		return
	}
	_ = req.RespondJSON(DescribeReply{Instance: r.cfg.InstanceID, Entry: e.entry})
}

func (r *Runtime) describeError(req micro.Request, code, msg string) {
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	_ = req.Error(code, msg, body, micro.WithHeaders(micro.Headers{"Svc-Error-Code": []string{code}}))
}

func (r *Runtime) stopDiscovery() {
	r.mu.Lock()
	svc, rsub := r.micro, r.refreshSub
	r.micro, r.refreshSub = nil, nil
	r.mu.Unlock()
	if rsub != nil {
		_ = rsub.Unsubscribe()
	}
	if svc != nil {
		if err := svc.Stop(); err != nil {
			r.log.Warn("stop micro service", "err", err)
		}
	}
}
