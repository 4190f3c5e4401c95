package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestAssetReadiness: an asset takes writes with a leader and a majority
// of its replicas online; otherwise it is stalled, and so is the mesh.
func TestAssetReadiness(t *testing.T) {
	peer := func(name string, offline bool) *jetstream.PeerInfo {
		return &jetstream.PeerInfo{Name: name, Offline: offline, Current: !offline}
	}
	for _, tc := range []struct {
		name     string
		replicas int
		ci       *jetstream.ClusterInfo
		quorum   bool
		stalled  string
	}{
		{"single server", 1, nil, true, ""},
		{"R3 all online", 3, &jetstream.ClusterInfo{RaftGroup: "S-R3", Leader: "n0", Replicas: []*jetstream.PeerInfo{peer("n1", false), peer("n2", false)}}, true, ""},
		{"R3 one node lost", 3, &jetstream.ClusterInfo{RaftGroup: "S-R3", Leader: "n0", Replicas: []*jetstream.PeerInfo{peer("n1", false), peer("n2", true)}}, true, ""},
		{"R3 two nodes lost", 3, &jetstream.ClusterInfo{RaftGroup: "S-R3", Leader: "n0", Replicas: []*jetstream.PeerInfo{peer("n1", true), peer("n2", true)}}, false, "no quorum: 1 of 3 replicas online"},
		{"R3 no leader", 3, &jetstream.ClusterInfo{RaftGroup: "S-R3", Replicas: []*jetstream.PeerInfo{peer("n1", false), peer("n2", true)}}, false, "no leader"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := assetOf("stream", "S", "", tc.replicas, tc.ci, "utpmesh")
			if a.Quorum != tc.quorum || a.Stalled != tc.stalled {
				t.Fatalf("quorum %t, stalled %q; want %t, %q", a.Quorum, a.Stalled, tc.quorum, tc.stalled)
			}
			rep := &statusReport{}
			rep.addAsset(a, map[string]*nodeStatus{})
			if got := len(rep.Problems) == 0; got != (tc.stalled == "") {
				t.Fatalf("problems %v for a stalled=%q asset", rep.Problems, tc.stalled)
			}
		})
	}
}

// TestReplicaBehind: a replica its group sees online but not current (a
// node whose JetStream stopped on a full disk stays routed) keeps the
// asset's quorum, and status counts it against its node as BEHIND and
// says so.
func TestReplicaBehind(t *testing.T) {
	ci := &jetstream.ClusterInfo{RaftGroup: "S-R3", Leader: "n0", Replicas: []*jetstream.PeerInfo{
		{Name: "n1", Current: true}, {Name: "n2", Current: false, Lag: 5}}}
	a := assetOf("stream", "S", "", 3, ci, "n0")
	if !a.Quorum || a.Stalled != "" || len(a.Behind) != 1 || a.Behind[0] != "n2" {
		t.Fatalf("asset %+v: want quorum, not stalled, n2 behind", a)
	}
	rep := &statusReport{}
	nodes := map[string]*nodeStatus{}
	rep.addAsset(a, nodes)
	if n := nodes["n2"]; n == nil || !n.Online || n.Behind != 1 || len(rep.Problems) != 0 {
		t.Fatalf("node n2 %+v, problems %v: want online, behind in 1 asset, no problem", n, rep.Problems)
	}
	rep.Ready = true
	for _, n := range nodes {
		rep.Nodes = append(rep.Nodes, *n)
	}
	var out strings.Builder
	ew := &statusWriter{w: &out}
	writeReadiness(ew, rep)
	wantContains(t, "status", out.String(), "BEHIND", "node n2 is online but not current in 1 asset", "full disk")
}

// TestStatusNotReady: when JetStream does not answer (stopped after a
// storage fault, or a node without quorum), status prints NOT READY with
// the reason and exits 1.
func TestStatusNotReady(t *testing.T) {
	srv, err := embednats.Start(embednats.Config{Port: -1}) // no JetStream at all
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	var out, errOut strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := runArgs(ctx, []string{"status", "--nats", srv.ClientURL(), "--timeout", "2s", "--discovery-wait", "50ms"}, &out, &errOut)
	if code != 1 {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	wantContains(t, "stdout", out.String(), "NOT READY", "JetStream does not answer")
	wantContains(t, "stderr", errOut.String(), "not ready")
}

// TestStatusNoCommandStream: what the JetStream step of status cannot
// read (here the command stream is missing; in a forming cluster a
// consumer listing can answer "temporarily unavailable") is a readiness
// problem: the report is still printed, NOT READY with the reason, exit 1.
func TestStatusNoCommandStream(t *testing.T) {
	srv, err := embednats.Start(embednats.Config{Port: -1, JetStream: true, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errOut strings.Builder
	code := runArgs(ctx, []string{"status", "--json", "--nats", srv.ClientURL(), "--timeout", "2s", "--discovery-wait", "50ms"}, &out, &errOut)
	var rep statusReport
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("status --json printed no report: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	want := "the command stream cg_cmd_" + subjects.DefaultVersion + " does not exist"
	if code != 1 || rep.Ready || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], want) {
		t.Fatalf("exit %d, ready %t, problems %q; want exit 1, not ready, %q", code, rep.Ready, rep.Problems, want)
	}
	wantContains(t, "stderr", errOut.String(), "not ready", want)
}

// TestStatusCluster: on a 3-node cluster with R3 streams, status lists
// the three nodes and a leader with quorum for every stream and consumer;
// with one node gone it is still ready and shows that node offline; with
// two gone, the survivor's status is NOT READY, exits 1 and says why.
func TestStatusCluster(t *testing.T) {
	c := meshtest.StartCluster(t, 3)
	nc := c.Connect()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if err := streams.Ensure(ctx, js, subjects.DefaultVersion, streams.WithReplicas(3)); err != nil {
		t.Fatal(err)
	}
	cfg := streams.ConsumerConfig(streams.ToolConsumer("echo"), []string{"cg." + subjects.DefaultVersion + ".*.*.cmd.tool.echo"}, 5*time.Second, -1)
	if _, err := streams.EnsureConsumer(ctx, js, subjects.DefaultVersion, cfg); err != nil {
		t.Fatal(err)
	}
	status := func(url string) (int, statusReport, string) {
		var out, errOut strings.Builder
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		code := runArgs(sctx, []string{"status", "--json", "--nats", url, "--timeout", "3s", "--discovery-wait", "50ms"}, &out, &errOut)
		var rep statusReport
		if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
			t.Fatalf("status --json: %v\n%s\n%s", err, out.String(), errOut.String())
		}
		return code, rep, errOut.String()
	}
	var rep statusReport
	var code int
	var stderr string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		// Replicas report current once they caught up with their leader.
		if code, rep, stderr = status(c.URLs()[0]); code == 0 || time.Now().After(deadline) {
			break
		}
	}
	if code != 0 || !rep.Ready || len(rep.Nodes) != 3 {
		t.Fatalf("status of a whole cluster: exit %d, ready %t, nodes %+v, problems %v (%s)", code, rep.Ready, rep.Nodes, rep.Problems, stderr)
	}
	for _, a := range rep.Assets {
		if a.Leader == "" || !a.Quorum || a.Replicas != 3 {
			t.Fatalf("asset %+v: want a leader and quorum of 3", a)
		}
	}

	// One node gone: the other two keep a quorum, status stays ready and
	// shows the lost node.
	c.Kill(2)
	lost := func(rep statusReport) bool {
		for _, n := range rep.Nodes {
			if n.Name == meshtest.NodeName(2) && !n.Online {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if code, rep, stderr = status(c.URLs()[0]); code == 0 && lost(rep) || time.Now().After(deadline) {
			break
		}
	}
	if code != 0 || !rep.Ready || !lost(rep) {
		t.Fatalf("status with 1 of 3 nodes gone: exit %d, ready %t, nodes %+v, problems %v (%s)", code, rep.Ready, rep.Nodes, rep.Problems, stderr)
	}

	c.Kill(1)
	code, rep, stderr = status(c.URLs()[0])
	if code != 1 || rep.Ready || len(rep.Problems) == 0 {
		t.Fatalf("status with 2 of 3 nodes gone: exit %d, ready %t, problems %v", code, rep.Ready, rep.Problems)
	}
	wantContains(t, "stderr", stderr, "not ready")
	t.Logf("without quorum: %v", rep.Problems)
}
