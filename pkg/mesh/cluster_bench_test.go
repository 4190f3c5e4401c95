package mesh_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// BenchmarkRoundTripCluster is BenchmarkRoundTrip's utp row on a 3-node
// cluster in one process: three meshes, each embedding a clustered
// nats-server, with the state replicated R3 in JetStream; the agent talks
// to node 0 and every node serves echo. Compare it with the single-node
// rows of the same `make bench` run (the three nodes share one disk and
// two cores here, so this is the cost of replication, not a cluster's
// capacity).
func BenchmarkRoundTripCluster(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	var routes, listen []string
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		listen = append(listen, l.Addr().String())
		routes = append(routes, "nats-route://"+l.Addr().String())
		l.Close()
	}
	meshes := make([]*mesh.Mesh, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			meshes[i], errs[i] = mesh.Start(ctx, mesh.Config{DataDir: filepath.Join(dir, fmt.Sprintf("n%d", i)), Listen: "127.0.0.1:0",
				Logger: benchLog(i), Tools: []worker.Tool{echo.Tool()}, Worker: worker.Config{Concurrency: 64},
				ServerName: fmt.Sprintf("n%d", i), Cluster: &embednats.Cluster{Name: "bench", Listen: listen[i], Routes: routes}})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("node %d: %v", i, err)
		}
	}
	defer func() {
		for _, m := range meshes {
			_ = m.Stop(ctx)
		}
	}()
	nc, err := nats.Connect(meshes[0].ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	results := map[string]stats{}
	for _, c := range []int{1, 64} {
		name := fmt.Sprintf("utp-R3/c=%d", c)
		b.Run(name, func(b *testing.B) {
			ac, err := agent.New(nc, agent.Config{Project: "demo", Channel: "main", AgentID: fmt.Sprintf("bench-cluster-%d", c)})
			if err != nil {
				b.Fatal(err)
			}
			defer ac.Close()
			var n atomic.Int64
			results[name] = measure(b, c, func() error {
				i := n.Add(1)
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				_, err := ac.Call(cctx, agent.CallRequest{ToolName: "echo", AgentTurnID: fmt.Sprintf("turn-%d", i%50), Arguments: json.RawMessage(`{"i":1}`)})
				return err
			})
		})
	}
	if len(results) == 2 {
		fmt.Fprintf(os.Stdout, "\n%-22s %9s %10s %10s\n", "round trip (cluster)", "calls/s", "p50", "p99")
		for _, k := range []string{"utp-R3/c=1", "utp-R3/c=64"} {
			s := results[k]
			fmt.Fprintf(os.Stdout, "%-22s %9.0f %10v %10v\n", k, s.rate, s.p50.Round(time.Microsecond), s.p99.Round(time.Microsecond))
		}
	}
}

func benchLog(i int) *slog.Logger {
	if os.Getenv("UTPMESH_BENCH_LOG") == "" {
		return quiet
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", i)
}
