//go:build !race

// This test re-enables JetStream on a node of a running cluster (the storage
// guard's heal), and nats-server v2.15.2's EnableJetStream replaces the
// routed-API queues (setJetStreamExportSubs) while route readers use them:
// a data race inside nats-server that the race detector reports at random.
// So it runs without -race, in `make test`'s second step (test-norace).

package mesh_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/tmpfstest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/mesh"
)

// TestClusterNodeDiskFullMesh: three meshes as one cluster, the third
// one's data directory alone on a 64 MiB tmpfs, which fills to the brim.
// That node is not Ready and names the full disk (/readyz 503, /healthz
// 200), the other two stay Ready, and the cluster shows the node not current in every stream's
// group (what `utpmesh status` lists as BEHIND). Calls go on through the other two —
// from an agent of a healthy node, and from an agent of the full node
// itself, whose clients the others serve through the routes; none ends
// by its deadline. Once the filler is removed the node heals by itself:
// Ready again, a current replica of every stream again (caught up), and
// the result of every call acknowledged before, during and after the
// fault is there.
func TestClusterNodeDiskFullMesh(t *testing.T) {
	vol := tmpfstest.Mount(t, 64<<20)
	const full = 2
	meshes := startMeshes(t, "diskfull", func(i int, c *mesh.Config) {
		c.MaxPayload, c.MaxCardBytes = 2<<20, 1<<20 // a 2 MiB floor
		if i == full {
			c.DataDir, c.MetricsAddr = vol, "127.0.0.1:0"
		}
	})
	ctx := context.Background()
	agentOn := func(m *mesh.Mesh, id string) *agent.Client {
		nc, err := nats.Connect(m.ClientURL(), nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		ac, err := agent.New(nc, agent.Config{Project: "demo", Channel: "main", AgentID: id})
		if err != nil {
			t.Fatal(err)
		}
		return ac
	}
	healthy, onFull := agentOn(meshes[0], "healthy"), agentOn(meshes[full], "onfull")
	var results []string // result card ids of acknowledged calls
	n := 0
	call := func(ac *agent.Client, wait time.Duration) error {
		cctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		n++
		out, err := ac.Call(cctx, agent.CallRequest{ToolName: "echo", AgentTurnID: "turn-diskfull", Arguments: json.RawMessage(fmt.Sprintf(`{"i":%d}`, n))})
		if err == nil {
			if out.Result.Status != card.StatusSuccess {
				return fmt.Errorf("call %d: %s", n, out.Result.Status)
			}
			results = append(results, out.ResultCard.CardID)
		}
		return err
	}
	for _, ac := range []*agent.Client{healthy, onFull} {
		waitFor(t, "a first call", func() bool { return call(ac, 10*time.Second) == nil })
	}
	waitFor(t, "every node ready", func() bool {
		for _, m := range meshes {
			if m.Ready() != nil {
				return false
			}
		}
		return true
	})

	filler := tmpfstest.Fill(t, vol)
	waitFor(t, "the full node not ready", func() bool { return meshes[full].Ready() != nil })
	if rerr := meshes[full].Ready(); !errors.Is(rerr, embednats.ErrNotReady) || !strings.Contains(rerr.Error(), "disk full") {
		t.Fatalf("full node: Ready = %v, want ErrNotReady naming the full disk", rerr)
	}
	t.Logf("full node: %v", meshes[full].Ready())
	// /readyz says why; /healthz stays 200: the node is alive and heals
	// by itself, a liveness probe must not restart it.
	base := strings.TrimSuffix(meshes[full].MetricsURL(), "/metrics")
	if code := httpStatus(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz of the full node = %d, want 503", code)
	}
	if code := httpStatus(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz of the full node = %d, want 200", code)
	}
	js := jsOn(t, meshes[0])
	name := fmt.Sprintf("n%d", full)
	waitFor(t, "the full node behind in every stream", func() bool { return replicaState(t, js, name) == "behind" })
	for i, m := range meshes[:full] {
		waitFor(t, fmt.Sprintf("node %d ready", i), func() bool { return m.Ready() == nil })
	}
	for _, tc := range []struct {
		who string
		ac  *agent.Client
	}{{"an agent of a healthy node", healthy}, {"an agent of the full node", onFull}} {
		// Leaders the full node held are elected elsewhere first.
		waitFor(t, "a call from "+tc.who, func() bool { return call(tc.ac, 10*time.Second) == nil })
		for range 5 {
			if err := call(tc.ac, 60*time.Second); err != nil {
				t.Fatalf("call from %s while node %d is full: %v", tc.who, full, err)
			}
		}
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the full node ready again", func() bool { return httpStatus(t, base+"/readyz") == http.StatusOK })
	waitFor(t, "the healed node a current replica of every stream", func() bool { return replicaState(t, js, name) == "current" })
	for _, ac := range []*agent.Client{onFull, healthy} {
		waitFor(t, "a call after the heal", func() bool { return call(ac, 10*time.Second) == nil })
		for range 3 {
			if err := call(ac, 60*time.Second); err != nil {
				t.Fatalf("call after the heal: %v", err)
			}
		}
	}
	for _, id := range results {
		if _, err := meshes[full].Cards().Get(ctx, "demo", id); err != nil {
			t.Fatalf("result card %s of an acknowledged call: %v", id, err)
		}
	}
	t.Logf("%d acknowledged calls, every result card kept", len(results))
}

// jsOn is a JetStream client of mesh m.
func jsOn(t *testing.T, m *mesh.Mesh) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(m.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// replicaState is "behind" when node is an offline or not current
// replica of every replicated stream (a node whose JetStream is stopped
// stays routed: the leaders see it online, but not current), "current"
// when it leads or is a current replica without lag of every one, else
// "".
func replicaState(t *testing.T, js jetstream.JetStream, node string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	behind, current, total := 0, 0, 0
	sl := js.ListStreams(ctx)
	for si := range sl.Info() {
		if si.Cluster == nil || si.Config.Replicas < 3 {
			continue
		}
		total++
		if si.Cluster.Leader == node {
			current++
			continue
		}
		for _, r := range si.Cluster.Replicas {
			switch {
			case r.Name != node:
			case r.Offline || !r.Current:
				behind++
			case r.Current && r.Lag == 0:
				current++
			}
		}
	}
	switch {
	case sl.Err() != nil || total == 0:
		return ""
	case behind == total:
		return "behind"
	case current == total:
		return "current"
	}
	return ""
}
