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

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// BenchmarkDispatchLinger measures what the dispatch linger
// (mesh.Config.DispatchLinger) costs and gains by the tool's duration: a
// closed loop at c=1 calls echo with sleep_ms 0, 1, 2 and 5 on a mesh
// with the linger off and with the default, and prints each p50. A tool
// quicker than the linger saves the card's commit; one that ends just
// after the linger may wait for the card's commit to end. Run it with a
// fixed op count, e.g. -benchtime 500x.
func BenchmarkDispatchLinger(b *testing.B) {
	p50 := map[string]time.Duration{}
	lingers := []struct {
		name string
		d    time.Duration
	}{{"off", -1}, {"default", 0}}
	sleeps := []int{0, 1, 2, 5}
	for _, l := range lingers {
		ctx := context.Background()
		m, err := mesh.Start(ctx, mesh.Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", Logger: quiet,
			Tools: []worker.Tool{echo.Tool()}, DispatchLinger: l.d})
		if err != nil {
			b.Fatal(err)
		}
		nc, err := nats.Connect(m.ClientURL())
		if err != nil {
			b.Fatal(err)
		}
		ac, err := agent.New(nc, agent.Config{Project: "demo", Channel: "main", AgentID: "bench-agent"})
		if err != nil {
			b.Fatal(err)
		}
		for _, ms := range sleeps {
			name := fmt.Sprintf("linger=%s/sleep=%dms", l.name, ms)
			b.Run(name, func(b *testing.B) {
				var n atomic.Int64
				args := json.RawMessage(fmt.Sprintf(`{"sleep_ms":%d}`, ms))
				p50[name] = measure(b, 1, func() error {
					r, err := ac.Call(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: fmt.Sprintf("turn-%d", n.Add(1)%50), Arguments: args})
					if err == nil && r.Result.Status != card.StatusSuccess {
						err = fmt.Errorf("call ended %s: %+v", r.Result.Status, r.Result.Error)
					}
					return err
				}).p50
			})
		}
		ac.Close()
		nc.Close()
		_ = m.Stop(ctx)
	}
	if len(p50) == len(lingers)*len(sleeps) {
		for _, ms := range sleeps {
			off, on := p50[fmt.Sprintf("linger=off/sleep=%dms", ms)], p50[fmt.Sprintf("linger=default/sleep=%dms", ms)]
			fmt.Fprintf(os.Stdout, "dispatch linger, echo sleep_ms %d, c=1 p50: off %v, default %v (%+v)\n", ms,
				off.Round(time.Microsecond), on.Round(time.Microsecond), (on - off).Round(time.Microsecond))
		}
	}
}
