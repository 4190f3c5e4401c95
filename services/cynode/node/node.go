// Package node is the CyNodeAI node tools over the mesh's own discovery:
// a node is one worker runtime (the NATS micro service utpmesh-worker that
// every runtime registers, see pkg/worker/discovery.go), named by its
// instance (node_slug). node.list and node.get report what discovery
// knows: the tools it serves, its versions, the projects it serves and
// its load (the per-tool counters of its micro STATS). node.refresh_config
// asks one node to reload its configuration (worker.RefreshEndpoint: it
// forgets its cached registry entries). All have scope pm.
//
// A sandbox node is a cynode worker as its sandbox locality reports it
// (services/cynode/sandbox: the micro service sandbox.MicroService, whose
// STATS data is the node's live sandboxes and capacity). node.list lists
// them under sandbox_nodes, each with the sandboxes of the calling
// project and the count of all; node.get finds one by its node name when
// no worker runtime has that slug.
//
// Discovery is a scatter-gather request: the tools wait up to
// FirstReplyTimeout for the first reply, then collect until no reply came
// for QuietWindow; a worker slower than that is missing from the answer.
package node

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
	"github.com/utpmesh/utpmesh/services/cynode/sandbox"
	"github.com/utpmesh/utpmesh/subjects"
)

// Tool names.
const (
	ToolList    = "node.list"
	ToolGet     = "node.get"
	ToolRefresh = "node.refresh_config"
)

// Discovery timing.
var (
	FirstReplyTimeout = 5 * time.Second
	QuietWindow       = 300 * time.Millisecond
)

// Node is one worker runtime as discovery reports it.
type Node struct {
	Slug            string    `json:"node_slug"`
	ServiceID       string    `json:"service_id"`
	Version         string    `json:"version"`
	ProtocolVersion string    `json:"protocol_version"`
	Projects        []string  `json:"projects"`
	Tools           []string  `json:"tools"`
	Started         time.Time `json:"started,omitempty"`
	Load            Load      `json:"load"`
}

// Load sums the node's per-tool counters.
type Load struct {
	Calls       uint64 `json:"calls"`
	Failed      uint64 `json:"failed"`
	InFlight    int64  `json:"in_flight"`
	Redelivered uint64 `json:"redelivered"`
}

// SandboxNode is a cynode worker's sandbox node, from its live STATS.
type SandboxNode struct {
	// Slug is the node's name (sandbox.NodeFile).
	Slug        string    `json:"node_slug"`
	ServiceID   string    `json:"service_id"`
	Incarnation string    `json:"incarnation"`
	Started     time.Time `json:"started"`
	// Sandboxes are those of the calling project; SandboxesTotal counts
	// every project's.
	Sandboxes      []sandbox.SandboxInfo `json:"sandboxes"`
	SandboxesTotal int                   `json:"sandboxes_total"`
	Capacity       sandbox.Capacity      `json:"capacity"`
}

// DiscoverSandboxNodes asks the mesh for its sandbox nodes; Sandboxes
// hold every project's (the tools keep the caller's).
func DiscoverSandboxNodes(ctx context.Context, nc *nats.Conn) ([]SandboxNode, error) {
	stats, err := collect(ctx, nc, "$SRV.STATS."+sandbox.MicroService)
	if err != nil {
		return nil, err
	}
	out := []SandboxNode{}
	for _, raw := range stats {
		var st micro.Stats
		if json.Unmarshal(raw, &st) != nil || st.ID == "" {
			continue
		}
		for _, ep := range st.Endpoints {
			var ns sandbox.NodeStats
			if ep == nil || len(ep.Data) == 0 || json.Unmarshal(ep.Data, &ns) != nil || ns.Node == "" {
				continue
			}
			out = append(out, SandboxNode{Slug: ns.Node, ServiceID: st.ID, Incarnation: ns.Incarnation, Started: ns.Started,
				Sandboxes: ns.Sandboxes, SandboxesTotal: len(ns.Sandboxes), Capacity: ns.Capacity})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slug < out[j].Slug })
	return out, nil
}

// forProject keeps the sandboxes of project.
func (n SandboxNode) forProject(project string) SandboxNode {
	var keep []sandbox.SandboxInfo
	for _, sb := range n.Sandboxes {
		if sb.ProjectID == project {
			keep = append(keep, sb)
		}
	}
	n.Sandboxes = keep
	if n.Sandboxes == nil {
		n.Sandboxes = []sandbox.SandboxInfo{}
	}
	return n
}

const slugParams = `{"type":"object","additionalProperties":false,"required":["node_slug"],"properties":{"node_slug":{"type":"string","minLength":1,"maxLength":256}}}`

// Specs are the node tools.
func Specs() []gateway.Spec {
	return []gateway.Spec{
		{Name: ToolList, Description: "Lists the mesh's nodes (worker runtimes): tools, versions, projects, load; and the sandbox nodes (cynode workers): their sandboxes of this project and capacity.", Scope: gateway.ScopePM,
			Params: `{"type":"object","additionalProperties":false,"properties":{"tool":{"type":"string","maxLength":256}}}`, Run: list},
		{Name: ToolGet, Description: "Returns one node by node_slug (its worker instance), or a sandbox node by its name.", Scope: gateway.ScopePM,
			Params: slugParams, Run: get},
		{Name: ToolRefresh, Description: "Makes one node reload its configuration: it forgets the registry entries it caches, so its next calls use the registry's current definitions.", Scope: gateway.ScopePM,
			Params: slugParams, Run: refresh},
	}
}

func collect(ctx context.Context, nc *nats.Conn, subject string) ([][]byte, error) {
	inbox := nc.NewRespInbox()
	ch := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, err
	}
	var out [][]byte
	wait := time.NewTimer(FirstReplyTimeout)
	defer wait.Stop()
	for {
		select {
		case m := <-ch:
			out = append(out, m.Data)
			wait.Reset(QuietWindow)
		case <-wait.C:
			return out, nil
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
}

// Discover asks the mesh for its nodes.
func Discover(ctx context.Context, nc *nats.Conn) ([]Node, error) {
	infos, err := collect(ctx, nc, "$SRV.INFO."+worker.ServiceName)
	if err != nil {
		return nil, err
	}
	stats, err := collect(ctx, nc, "$SRV.STATS."+worker.ServiceName)
	if err != nil {
		return nil, err
	}
	byID := map[string]*micro.Stats{}
	for _, raw := range stats {
		var s micro.Stats
		if json.Unmarshal(raw, &s) == nil && s.ID != "" {
			byID[s.ID] = &s
		}
	}
	var out []Node
	for _, raw := range infos {
		var in micro.Info
		if json.Unmarshal(raw, &in) != nil || in.ID == "" {
			continue
		}
		n := Node{Slug: in.Metadata[worker.MetaInstance], ServiceID: in.ID, Version: in.Version,
			ProtocolVersion: in.Metadata[worker.MetaProtocolVersion], Projects: split(in.Metadata[worker.MetaProjects]), Tools: []string{}}
		st := byID[in.ID]
		if st != nil {
			n.Started = st.Started
		}
		for _, ep := range in.Endpoints {
			name := ep.Metadata[worker.MetaTool]
			if name == "" {
				name = ep.Name
			}
			n.Tools = append(n.Tools, name)
			if st == nil {
				continue
			}
			for _, es := range st.Endpoints {
				var d worker.ToolStats
				if es.Name == ep.Name && len(es.Data) > 0 && json.Unmarshal(es.Data, &d) == nil {
					n.Load.Calls += d.Calls
					n.Load.Failed += d.Failed
					n.Load.InFlight += d.InFlight
					n.Load.Redelivered += d.Redelivered
				}
			}
		}
		sort.Strings(n.Tools)
		if n.Slug == "" {
			n.Slug = in.ID
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slug < out[j].Slug })
	return out, nil
}

func split(s string) []string {
	out := []string{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// discover asks for both kinds of nodes at once; sandbox nodes keep the
// calling project's sandboxes.
func discover(ctx context.Context, x *gateway.Exec) ([]Node, []SandboxNode, error) {
	if x.Conn == nil {
		return nil, nil, gateway.Errorf(gateway.TypeUnavailable, "this cynode service has no NATS connection to ask the mesh")
	}
	nc, err := x.Conn(ctx)
	if err != nil {
		return nil, nil, gateway.Errorf(gateway.TypeUnavailable, "the mesh's connection: %v", err)
	}
	var wg sync.WaitGroup
	var sbs []SandboxNode
	var sbErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		sbs, sbErr = DiscoverSandboxNodes(ctx, nc)
	}()
	nodes, err := Discover(ctx, nc)
	wg.Wait()
	if err == nil {
		err = sbErr
	}
	if err != nil {
		return nil, nil, gateway.Errorf(gateway.TypeUnavailable, "discovery: %v", err)
	}
	for i := range sbs {
		sbs[i] = sbs[i].forProject(x.Project)
	}
	return nodes, sbs, nil
}

func list(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		Tool string `json:"tool"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	nodes, sbs, err := discover(ctx, x)
	if err != nil {
		return nil, err
	}
	out := []Node{}
	for _, n := range nodes {
		if a.Tool == "" || contains(n.Tools, a.Tool) {
			out = append(out, n)
		}
	}
	if a.Tool != "" && !strings.HasPrefix(a.Tool, "sandbox.") {
		sbs = []SandboxNode{}
	}
	return map[string]any{"nodes": out, "sandbox_nodes": sbs}, nil
}

// find returns the worker runtime of a slug, or else the sandbox node of
// that name (nil when a runtime matched).
func find(ctx context.Context, x *gateway.Exec) (Node, *SandboxNode, error) {
	var a struct {
		Slug string `json:"node_slug"`
	}
	if err := x.Bind(&a); err != nil {
		return Node{}, nil, err
	}
	nodes, sbs, err := discover(ctx, x)
	if err != nil {
		return Node{}, nil, err
	}
	var slugs []string
	for _, n := range nodes {
		if n.Slug == a.Slug {
			return n, nil, nil
		}
		slugs = append(slugs, n.Slug)
	}
	var names []string
	for i, n := range sbs {
		if n.Slug == a.Slug {
			return Node{}, &sbs[i], nil
		}
		names = append(names, n.Slug)
	}
	return Node{}, nil, gateway.Errorf(gateway.TypeNotFound, "no node %q answered discovery (nodes: %v; sandbox nodes: %v; node.list shows them)", a.Slug, slugs, names)
}

func get(ctx context.Context, x *gateway.Exec) (any, error) {
	n, sb, err := find(ctx, x)
	if err != nil {
		return nil, err
	}
	if sb != nil {
		return sb, nil
	}
	return n, nil
}

// RefreshTimeout bounds the refresh request to the node.
var RefreshTimeout = 10 * time.Second

func refresh(ctx context.Context, x *gateway.Exec) (any, error) {
	n, sb, err := find(ctx, x)
	if err != nil {
		return nil, err
	}
	if sb != nil {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "%s is a sandbox node; node.refresh_config takes a worker runtime's node_slug (node.list: nodes)", sb.Slug)
	}
	nc, err := x.Conn(ctx)
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeUnavailable, "the mesh's connection: %v", err)
	}
	subj, err := subjects.Service(x.Call.Version, x.Project, x.Call.ChannelID, worker.DescribeService, worker.RefreshOp(n.ServiceID))
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeInternal, "refresh subject of node %s: %v", n.Slug, err)
	}
	rctx, cancel := context.WithTimeout(ctx, RefreshTimeout)
	defer cancel()
	msg, err := deadline.Request(rctx, nc, subj.String(), nil)
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeUnavailable, "node %s did not answer the refresh on %s: %v (a worker older than this mesh has no refresh endpoint)", n.Slug, subj, err)
	}
	var rep worker.RefreshReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return nil, gateway.Errorf(gateway.TypeUnavailable, "node %s answered the refresh with %q: %v", n.Slug, msg.Data, err)
	}
	return map[string]any{"node_slug": n.Slug, "refreshed": true, "dropped_entries": rep.Dropped}, nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
