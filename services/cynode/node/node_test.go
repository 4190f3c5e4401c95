package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/worker"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
	"github.com/utpmesh/utpmesh/services/cynode/node"
	"github.com/utpmesh/utpmesh/subjects"
)

// fakeWorker registers on nc what a worker runtime registers for
// discovery (pkg/worker/discovery.go): the utpmesh-worker micro service
// with its metadata, one endpoint per tool carrying the tool's counters
// as STATS data, and, with refresh, the refresh_config endpoint.
func fakeWorker(t *testing.T, nc *nats.Conn, instance, projects string, tools map[string]worker.ToolStats, refresh bool) micro.Service {
	t.Helper()
	svc, err := micro.AddService(nc, micro.Config{Name: worker.ServiceName, Version: "1.2.3",
		Metadata:     map[string]string{worker.MetaInstance: instance, worker.MetaProtocolVersion: subjects.DefaultVersion, worker.MetaProjects: projects},
		StatsHandler: func(e *micro.Endpoint) any { return tools[e.Metadata[worker.MetaTool]] }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	for name := range tools {
		ep := worker.EndpointName(name)
		subj, err := subjects.ServiceOpPattern(subjects.DefaultVersion, worker.DescribeService, ep)
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.AddEndpoint(ep, micro.HandlerFunc(func(micro.Request) {}), micro.WithEndpointSubject(subj),
			micro.WithEndpointMetadata(map[string]string{worker.MetaTool: name})); err != nil {
			t.Fatal(err)
		}
	}
	if refresh {
		subj, err := subjects.ServiceOpPattern(subjects.DefaultVersion, worker.DescribeService, worker.RefreshOp(svc.Info().ID))
		if err != nil {
			t.Fatal(err)
		}
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
			body, _ := json.Marshal(worker.RefreshReply{Instance: instance, Dropped: len(tools)})
			_ = m.Respond(body)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	return svc
}

func start(t *testing.T) (*ct.Direct, *nats.Conn, func(string) gateway.Spec) {
	t.Helper()
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	d := ct.NewDirect(t, nil)
	d.Conn = func(context.Context) (*nats.Conn, error) { return nc, nil }
	specs := node.Specs()
	return d, nc, func(name string) gateway.Spec { return d.Spec(specs, name) }
}

func slugs(v map[string]any) []string {
	var out []string
	for _, n := range v["nodes"].([]any) {
		out = append(out, ct.Str(n, "node_slug"))
	}
	return out
}

func TestDiscover(t *testing.T) {
	d, nc, spec := start(t)
	// Every fake answers at once; a longer quiet window keeps a loaded
	// machine from making one of them look missing.
	defer func(old time.Duration) { node.QuietWindow = old }(node.QuietWindow)
	node.QuietWindow = time.Second
	fakeWorker(t, nc, "w-b", "demo, p2,", map[string]worker.ToolStats{
		"artifact.put": {Calls: 5, Failed: 1, InFlight: 2, Redelivered: 1},
		"db.task.get":  {Calls: 3},
	}, true)
	fakeWorker(t, nc, "w-a", "", map[string]worker.ToolStats{"echo": {Calls: 1}}, false)
	anon := fakeWorker(t, nc, "", "demo", map[string]worker.ToolStats{"echo": {}}, false)
	// Another micro service is no node.
	other, err := micro.AddService(nc, micro.Config{Name: "something-else", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Stop() }()

	nodes, err := node.Discover(t.Context(), nc)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{anon.Info().ID, "w-a", "w-b"}
	slices.Sort(want)
	var got []string
	for _, n := range nodes {
		got = append(got, n.Slug)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("nodes %v; want %v (sorted; a node without an instance is named by its service id)", got, want)
	}
	b := nodes[slices.Index(got, "w-b")]
	if b.Version != "1.2.3" || b.ProtocolVersion != subjects.DefaultVersion || !slices.Equal(b.Projects, []string{"demo", "p2"}) ||
		!slices.Equal(b.Tools, []string{"artifact.put", "db.task.get"}) || b.Started.IsZero() ||
		b.Load != (node.Load{Calls: 8, Failed: 1, InFlight: 2, Redelivered: 1}) {
		t.Fatalf("node w-b = %+v", b)
	}
	if a := nodes[slices.Index(got, "w-a")]; a.Projects == nil || len(a.Projects) != 0 {
		t.Fatalf("a node of no project lists [] projects: %+v", a)
	}

	for _, tc := range []struct {
		tool string
		want []string
	}{{"", want}, {"echo", sorted(anon.Info().ID, "w-a")}, {"artifact.put", []string{"w-b"}}, {"nope", nil}} {
		got := d.OK(spec(node.ToolList), ct.PMAgent, map[string]any{"tool": tc.tool})
		if s := slugs(got); fmt.Sprint(s) != fmt.Sprint(tc.want) || got["nodes"] == nil {
			t.Errorf("tool %q: %v; want %v", tc.tool, s, tc.want)
		}
	}
	if got := d.OK(spec(node.ToolGet), ct.PMAgent, map[string]any{"node_slug": "w-a"}); got["service_id"] == "" || ct.Str(got, "tools", 0) != "echo" {
		t.Fatalf("get = %v", got)
	}
	d.Fail(spec(node.ToolGet), ct.PMAgent, map[string]any{"node_slug": "w-z"}, "not_found", `no node "w-z" answered discovery (nodes: [`)

	refreshed := d.OK(spec(node.ToolRefresh), ct.PMAgent, map[string]any{"node_slug": "w-b"})
	if refreshed["refreshed"] != true || refreshed["dropped_entries"] != float64(2) || refreshed["node_slug"] != "w-b" {
		t.Fatalf("refresh = %v", refreshed)
	}
	d.Fail(spec(node.ToolRefresh), ct.PMAgent, map[string]any{"node_slug": "w-a"}, "unavailable", "node w-a did not answer the refresh")
	d.Fail(spec(node.ToolRefresh), ct.PMAgent, map[string]any{"node_slug": "w-z"}, "not_found", "no node")
}

func TestNoNodes(t *testing.T) {
	d, nc, spec := start(t)
	// Nobody answers: the tools wait FirstReplyTimeout, then answer none.
	defer func(old time.Duration) { node.FirstReplyTimeout = old }(node.FirstReplyTimeout)
	node.FirstReplyTimeout = 100 * time.Millisecond
	if got := d.OK(spec(node.ToolList), ct.PMAgent, map[string]any{}); got["nodes"] == nil || len(got["nodes"].([]any)) != 0 {
		t.Fatalf("list = %v; want [] (not null)", got)
	}
	d.Fail(spec(node.ToolGet), ct.PMAgent, map[string]any{"node_slug": "x"}, "not_found", "(nodes: [];")
	// A canceled context ends discovery with its error.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := node.Discover(ctx, nc); !errors.Is(err, context.Canceled) {
		t.Fatalf("Discover with a canceled context: %v", err)
	}
}

func TestNoConnection(t *testing.T) {
	d := ct.NewDirect(t, nil)
	for _, tool := range []string{node.ToolList, node.ToolGet, node.ToolRefresh} {
		d.Fail(d.Spec(node.Specs(), tool), ct.PMAgent, map[string]any{"node_slug": "x"}, "unavailable", "this cynode service has no NATS connection to ask the mesh")
	}
	d.Conn = func(context.Context) (*nats.Conn, error) { return nil, errors.New("not connected yet") }
	d.Fail(d.Spec(node.Specs(), node.ToolList), ct.PMAgent, map[string]any{}, "unavailable", "the mesh's connection: not connected yet")
}

func sorted(s ...string) []string { slices.Sort(s); return s }
