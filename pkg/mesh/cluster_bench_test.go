package mesh_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
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
	meshes := startMeshes(b, "bench", func(i int, c *mesh.Config) {
		c.Logger, c.Worker = benchLog(i), worker.Config{Concurrency: 64}
	})
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
