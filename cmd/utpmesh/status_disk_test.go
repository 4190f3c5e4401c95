//go:build !race

// This test re-enables JetStream on a node of a running cluster (the storage
// guard's heal), and nats-server v2.15.2's EnableJetStream replaces the
// routed-API queues (setJetStreamExportSubs) while route readers use them:
// a data race inside nats-server that the race detector reports at random.
// So it runs without -race, in `make test`'s second step (test-norace).

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/tmpfstest"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestStatusClusterDiskFull: one node of a 3-node cluster, its data dir
// alone on a tmpfs, runs out of disk. `status` against a healthy node and
// against the full node itself stays ready (exit 0: two of three
// replicas take the writes) and lists the full node BEHIND in every
// stream and says why; once space returns it is current again.
func TestStatusClusterDiskFull(t *testing.T) {
	vol := tmpfstest.Mount(t, 32<<20)

	var listen, routes []string
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listen = append(listen, l.Addr().String())
		routes = append(routes, "nats-route://"+l.Addr().String())
		l.Close()
	}
	const full = 2
	var srvs []*embednats.Server
	for i := range 3 {
		dir := t.TempDir()
		if i == full {
			dir = vol
		}
		srv, err := embednats.Start(embednats.Config{Port: -1, ServerName: fmt.Sprintf("n%d", i), DataDir: dir, JetStream: true,
			MaxPayload: embednats.MinMaxPayload, MinFreeBytes: 2 << 20, StorageCheck: 100 * time.Millisecond,
			Cluster: &embednats.Cluster{Name: "statusdisk", Listen: listen[i], Routes: routes}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
		srvs = append(srvs, srv)
	}
	ctx := context.Background()
	nc, err := srvs[0].Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	await := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting: %s", what)
			}
		}
	}
	await("R3 streams", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return streams.Ensure(cctx, js, subjects.DefaultVersion, streams.WithReplicas(3)) == nil
	})
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
	behind := func(rep statusReport) int {
		for _, n := range rep.Nodes {
			if n.Name == fmt.Sprintf("n%d", full) {
				return n.Behind
			}
		}
		return -1
	}
	streamsOf := func(rep statusReport) int {
		n := 0
		for _, a := range rep.Assets {
			if a.Kind != "consumer" {
				n++
			}
		}
		return n
	}
	await("a whole cluster, every node current", func() bool {
		code, rep, _ := status(srvs[0].ClientURL())
		return code == 0 && rep.Ready && behind(rep) == 0
	})

	filler := tmpfstest.Fill(t, vol)
	await("the full node not ready", func() bool { return srvs[full].Ready() != nil })
	for _, i := range []int{0, full} {
		var rep statusReport
		var code int
		await(fmt.Sprintf("status from node %d: n%d behind in every stream", i, full), func() bool {
			code, rep, _ = status(srvs[i].ClientURL())
			return code == 0 && rep.Ready && behind(rep) >= streamsOf(rep)
		})
		t.Logf("status from node %d: n%d behind in %d assets", i, full, behind(rep))
	}
	var out, errOut strings.Builder
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if code := runArgs(sctx, []string{"status", "--nats", srvs[0].ClientURL(), "--timeout", "3s", "--discovery-wait", "50ms"}, &out, &errOut); code != 0 {
		t.Fatalf("status exit %d: %s", code, errOut.String())
	}
	wantContains(t, "status", out.String(), "BEHIND", fmt.Sprintf("node n%d is online but not current in", full), "full disk")

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	await("the node current again", func() bool {
		code, rep, _ := status(srvs[0].ClientURL())
		return srvs[full].Ready() == nil && code == 0 && behind(rep) == 0
	})
}
