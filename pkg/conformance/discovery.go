package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/subjects"
)

// endpoint is one discovered endpoint serving the probe tool.
type endpoint struct {
	serviceID string
	name      string
	projects  []string
}

// discoveryConn is the connection discovery requests go on.
func (k *toolKit) discoveryConn() *nats.Conn {
	if k.cfg.Admin != nil {
		return k.cfg.Admin
	}
	return k.cfg.Conn
}

// gather sends a request on subject and collects the replies until none
// came for 300 ms (at most 3 s).
func gather(ctx context.Context, nc *nats.Conn, subject string) ([][]byte, error) {
	inbox := nc.NewRespInbox()
	ch := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", inbox, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, fmt.Errorf("request %s: %w", subject, err)
	}
	var out [][]byte
	deadline := time.NewTimer(3 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case m := <-ch:
			out = append(out, m.Data)
		case <-time.After(300 * time.Millisecond):
			return out, nil
		case <-deadline.C:
			return out, nil
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
}

// endpoints lists the discovered endpoints whose metadata.tool is the probe.
func (k *toolKit) endpoints(ctx context.Context) ([]endpoint, error) {
	infos, err := gather(ctx, k.discoveryConn(), "$SRV.INFO."+worker.ServiceName)
	if err != nil {
		return nil, err
	}
	var out []endpoint
	for _, raw := range infos {
		var in micro.Info
		if json.Unmarshal(raw, &in) != nil || in.ID == "" {
			continue
		}
		for _, ep := range in.Endpoints {
			if ep.Metadata[worker.MetaTool] == k.cfg.Tool {
				out = append(out, endpoint{serviceID: in.ID, name: ep.Name, projects: strings.Split(in.Metadata[worker.MetaProjects], ",")})
			}
		}
	}
	return out, nil
}

func (k *toolKit) discovery(ctx context.Context) (Outcome, string) {
	e, err := k.cfg.Agent.Registry().Get(ctx, k.project, k.cfg.Tool)
	if err != nil {
		return failf("registry: %v", err)
	}
	if e.ToolName != k.cfg.Tool {
		return failf("registry entry names %q", e.ToolName)
	}
	eps, err := k.endpoints(ctx)
	if err != nil {
		return failf("$SRV.INFO.%s: %v", worker.ServiceName, err)
	}
	if len(eps) == 0 {
		return failf("no $SRV.INFO.%s reply has an endpoint with metadata.tool %q", worker.ServiceName, k.cfg.Tool)
	}
	ep := eps[0]
	if !slices.Contains(ep.projects, k.project) {
		return failf("service %s: metadata.projects %q lacks %s", ep.serviceID, strings.Join(ep.projects, ","), k.project)
	}
	stats, err := gather(ctx, k.discoveryConn(), "$SRV.STATS."+worker.ServiceName+"."+ep.serviceID)
	if err != nil || len(stats) == 0 {
		return failf("$SRV.STATS.%s.%s: no reply (%v)", worker.ServiceName, ep.serviceID, err)
	}
	var st micro.Stats
	if err := json.Unmarshal(stats[0], &st); err != nil {
		return failf("$SRV.STATS reply: %v", err)
	}
	found := false
	for _, es := range st.Endpoints {
		if es.Name != ep.name {
			continue
		}
		var d worker.ToolStats
		if err := json.Unmarshal(es.Data, &d); err != nil {
			return failf("$SRV.STATS endpoint %s: data %s is not the call counters: %v", es.Name, es.Data, err)
		}
		var keys map[string]json.RawMessage
		_ = json.Unmarshal(es.Data, &keys)
		for _, want := range []string{"calls", "failed", "in_flight", "redelivered", "claim_takeovers"} {
			if _, ok := keys[want]; !ok {
				return failf("$SRV.STATS endpoint %s: data %s lacks %q", es.Name, es.Data, want)
			}
		}
		found = true
	}
	if !found {
		return failf("$SRV.STATS of service %s has no endpoint %s", ep.serviceID, ep.name)
	}
	subj, err := subjects.Service(k.ver, k.project, k.channel, "worker", ep.name)
	if err != nil {
		return failf("describe subject of endpoint %q: %v", ep.name, err)
	}
	m, err := deadline.Request(ctx, k.discoveryConn(), subj.String(), nil)
	if err != nil {
		return failf("describe request %s: %v", subj, err)
	}
	var d struct {
		Instance string `json:"instance"`
		Entry    struct {
			ToolName string `json:"tool_name"`
		} `json:"entry"`
	}
	if err := json.Unmarshal(m.Data, &d); err != nil || d.Entry.ToolName != k.cfg.Tool || d.Instance == "" {
		return failf("describe request %s answered %s, want {instance, entry} of %s", subj, m.Data, k.cfg.Tool)
	}
	return passf("registered; %d worker(s) answer $SRV.INFO/STATS with endpoint %s; describe answered by %s", len(eps), ep.name, d.Instance)
}
