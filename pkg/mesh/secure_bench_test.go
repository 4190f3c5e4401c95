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
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// BenchmarkRoundTripSecured is BenchmarkRoundTrip's utp round trip with
// the trust model on and off: "open" is a mesh without NATS identities or
// the Cedar gate; "secured" has both (the agent connects with its
// agent-demo identity and carries a mandate). Compare the two lines it
// prints; run it with a fixed op count, e.g. -benchtime 1000x.
func BenchmarkRoundTripSecured(b *testing.B) {
	results := map[string]stats{}
	for _, secured := range []bool{false, true} {
		ctx := context.Background()
		cfg := mesh.Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", Logger: quiet, Tools: []worker.Tool{echo.Tool()},
			Worker: worker.Config{Concurrency: 64}}
		if secured {
			cfg.Auth, cfg.Identities = &mesh.AuthConfig{}, &mesh.IdentityConfig{}
		}
		m, err := mesh.Start(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		var opts []nats.Option
		acfg := agent.Config{Project: "demo", Channel: "main", AgentID: "bench-agent"}
		if secured {
			opt, err := creds.Option(m.CredsFile("agent-demo"))
			if err != nil {
				b.Fatal(err)
			}
			opts = append(opts, opt)
			if _, err := m.Auth().Store.PutPolicies(ctx, "demo", `permit(principal, action == Action::"echo", resource in Project::"demo");`); err != nil {
				b.Fatal(err)
			}
			key, _, err := m.Auth().Keys.Ensure(ctx, "demo")
			if err != nil {
				b.Fatal(err)
			}
			if acfg.Mandate, err = mandate.Issue(key, mandate.Claims{Subject: "bench-agent", ExpiresAt: time.Now().Add(time.Hour).Unix(),
				Mandate: mandate.Grant{PolicySet: `permit(principal, action == Action::"echo", resource);`}}, time.Now()); err != nil {
				b.Fatal(err)
			}
		}
		nc, err := nats.Connect(m.ClientURL(), opts...)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range []int{1, 64} {
			name := fmt.Sprintf("open/c=%d", c)
			if secured {
				name = fmt.Sprintf("secured/c=%d", c)
			}
			b.Run(name, func(b *testing.B) {
				ac, err := agent.New(nc, acfg)
				if err != nil {
					b.Fatal(err)
				}
				defer ac.Close()
				var n atomic.Int64
				results[name] = measure(b, c, func() error {
					i := n.Add(1)
					r, err := ac.Call(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: fmt.Sprintf("turn-%d", i%50), Arguments: json.RawMessage(`{"i":1}`)})
					if err == nil && r.Result.Status != card.StatusSuccess {
						err = fmt.Errorf("call ended %s: %+v", r.Result.Status, r.Result.Error)
					}
					return err
				})
			})
		}
		nc.Close()
		_ = m.Stop(ctx)
	}
	if len(results) == 4 {
		for _, c := range []string{"1", "64"} {
			o, s := results["open/c="+c], results["secured/c="+c]
			fmt.Fprintf(os.Stdout, "c=%s: open %.0f calls/s p50 %v p99 %v; secured %.0f calls/s p50 %v p99 %v; secured/open throughput %.3f\n", c,
				o.rate, o.p50.Round(time.Microsecond), o.p99.Round(time.Microsecond), s.rate, s.p50.Round(time.Microsecond), s.p99.Round(time.Microsecond), s.rate/o.rate)
		}
	}
}
