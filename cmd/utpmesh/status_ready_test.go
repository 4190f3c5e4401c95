package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/embednats"
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
