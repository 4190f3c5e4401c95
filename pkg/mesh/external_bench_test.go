package mesh_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/mesh/externaltest"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// BenchmarkRoundTripExternal is BenchmarkRoundTripCluster's row for a mesh
// that joined a NATS deployment (`up --nats`): three nats-servers in
// operator mode (JWT users, sync always) in this process, one mesh
// serving echo with its state R3 in their JetStream, the agent connected
// as the agent-demo user. Same caveat: one disk and two cores for all.
func BenchmarkRoundTripExternal(b *testing.B) {
	ctx := context.Background()
	d := externaltest.Start(b, deployment(3, true))
	opt, err := creds.Option(d.Creds(meshauth.RoleCore))
	if err != nil {
		b.Fatal(err)
	}
	m, err := mesh.Start(ctx, mesh.Config{DataDir: b.TempDir(), Logger: benchLog(0), Tools: []worker.Tool{echo.Tool()},
		Worker: worker.Config{Concurrency: 64}, External: &mesh.ExternalConfig{URL: d.URL(), Options: []nats.Option{opt}}})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Stop(ctx)
	aopt, err := creds.Option(d.Creds(creds.AgentName("demo")))
	if err != nil {
		b.Fatal(err)
	}
	nc, err := nats.Connect(d.URL(), aopt)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	results := map[string]stats{}
	for _, c := range []int{1, 64} {
		name := fmt.Sprintf("utp-external-R3/c=%d", c)
		b.Run(name, func(b *testing.B) {
			ac, err := agent.New(nc, agent.Config{Project: "demo", Channel: "main", AgentID: fmt.Sprintf("bench-external-%d", c)})
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
		fmt.Fprintf(os.Stdout, "\n%-26s %9s %10s %10s\n", "round trip (external)", "calls/s", "p50", "p99")
		for _, k := range []string{"utp-external-R3/c=1", "utp-external-R3/c=64"} {
			s := results[k]
			fmt.Fprintf(os.Stdout, "%-26s %9.0f %10v %10v\n", k, s.rate, s.p50.Round(time.Microsecond), s.p99.Round(time.Microsecond))
		}
	}
}
