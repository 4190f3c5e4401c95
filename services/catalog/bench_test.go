package catalog_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/registry/natsreg"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/tasks"
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/ratelimit"
	atptools "github.com/utpmesh/utpmesh/services/atp/tools"
	"github.com/utpmesh/utpmesh/services/cynode"
	cynodestore "github.com/utpmesh/utpmesh/services/cynode/store"
	"github.com/utpmesh/utpmesh/services/toolkit/tooltest"
)

// benchCatalogue is one catalogue in BenchmarkCatalogue: open builds one
// worker's tools on its own connection (its state in the shared bucket);
// setup runs once and returns the call of number i.
type benchCatalogue struct {
	name  string
	open  func(ctx context.Context, b *testing.B, nc *nats.Conn, dir string) ([]worker.Tool, func(context.Context) (string, error))
	calls func(setup string, i int) (tool string, args any)
	// agent is the calling agent and its mandate ("bench" and none when
	// nil).
	agent func(b *testing.B) (id, mandate string)
}

// benchKey signs the mandates of the cynode bench agent (its gateway
// checks them).
var benchKey = sync.OnceValue(func() *mandate.IssuerKey {
	k, err := mandate.GenerateKey(tooltest.Project)
	if err != nil {
		panic(err)
	}
	return k
})

var benchCatalogues = []benchCatalogue{
	{name: "atlas.tasks",
		open: func(ctx context.Context, b *testing.B, nc *nats.Conn, dir string) ([]worker.Tool, func(context.Context) (string, error)) {
			cards, err := natsstore.NewClient(nc)
			if err != nil {
				b.Fatal(err)
			}
			ts, err := tasks.Build(atlas.Deps{NC: nc, Store: cards, DataDir: dir, State: atlas.StateJetStream, Context: ctx, Logger: tooltest.Quiet})
			if err != nil {
				b.Fatal(err)
			}
			return ts, func(context.Context) (string, error) { return "", nil }
		},
		calls: func(_ string, i int) (string, any) {
			if i%2 == 0 {
				return tasks.ToolCreate, map[string]any{"title": fmt.Sprint("task ", i)}
			}
			return tasks.ToolList, map[string]any{"limit": 5}
		}},
	{name: "atp",
		open: func(ctx context.Context, b *testing.B, nc *nats.Conn, dir string) ([]worker.Tool, func(context.Context) (string, error)) {
			cards, err := natsstore.NewClient(nc)
			if err != nil {
				b.Fatal(err)
			}
			s, err := atptools.Open(atp.Deps{NC: nc, Cards: cards, DataDir: dir, Context: ctx, TickEvery: -1, Logger: tooltest.Quiet,
				RateLimits: func(string) ratelimit.Limits { return ratelimit.Limits{CallsPerMinute: -1} }})
			if err != nil {
				b.Fatal(err)
			}
			ts, err := s.Tools()
			if err != nil {
				b.Fatal(err)
			}
			return ts, func(ctx context.Context) (string, error) {
				bk, err := s.LoadFixture(ctx, tooltest.Project)
				if err != nil {
					return "", err
				}
				return bk.ID, nil
			}
		},
		calls: func(booking string, i int) (string, any) {
			if i%2 == 0 {
				return atptools.ToolRecordSafetyCheck, map[string]any{"booking_object_id": booking, "check_type": "SKILL_ASSESSMENT",
					"subject": "p-ben", "outcome": "PASS", "checked_by": "bench"}
			}
			return atptools.ToolGetBookingStatus, map[string]any{"booking_object_id": booking}
		}},
	{name: "cynode",
		open: func(ctx context.Context, b *testing.B, nc *nats.Conn, dir string) ([]worker.Tool, func(context.Context) (string, error)) {
			cards, err := natsstore.NewClient(nc)
			if err != nil {
				b.Fatal(err)
			}
			cfg := &cynode.Config{Agents: map[string]cynode.Agent{"bench-pm": {Type: cynode.PM}},
				AccessPolicies: `permit(principal, action == Action::"mcp.tool.invoke", resource);`}
			cfg.Seed.Tasks = []cynodestore.Task{{ID: "bench-task", ProjectID: tooltest.Project}}
			ts, err := cynode.Build(cynode.Deps{NC: nc, Cards: cards, DataDir: dir, StateReplicas: 1, Config: cfg, Keys: mandate.StaticKeys{benchKey()},
				Context: ctx, Logger: tooltest.Quiet})
			if err != nil {
				b.Fatal(err)
			}
			return ts, func(context.Context) (string, error) { return "", nil }
		},
		calls: func(_ string, i int) (string, any) {
			if i%2 == 0 {
				return "artifact.put", map[string]any{"task_id": "bench-task", "path": fmt.Sprintf("out/%d.md", i%64),
					"content_bytes_base64": base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("# artifact %d\n", i)))}
			}
			return "artifact.get", map[string]any{"task_id": "bench-task", "path": "out/0.md"} // the warm-up's first put
		},
		agent: func(b *testing.B) (string, string) {
			tok, err := mandate.Issue(benchKey(), mandate.Claims{Subject: "bench-pm", ExpiresAt: time.Now().Add(time.Hour).Unix(),
				Mandate: mandate.Grant{PolicySet: `permit(principal, action == Action::"mcp.tool.invoke", resource);`}}, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			return "bench-pm", tok
		}},
}

// BenchmarkCatalogue is a catalogue's call throughput with one and with
// two worker runtimes (each on its own connection, as two processes), the
// state in the shared JetStream bucket (R1, fsync before acknowledge):
// 8 callers, half writes and half reads, all in one project (cynode:
// artifact.put and artifact.get, contents in the object store).
//
//	go test -run '^$' -bench Catalogue -benchtime 400x ./services/catalog
func BenchmarkCatalogue(b *testing.B) {
	for _, c := range benchCatalogues {
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/workers=%d", c.name, workers), func(b *testing.B) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				h := tooltest.Start(b, mesh.Config{})
				var setup func(context.Context) (string, error)
				for w := range workers {
					nc, err := nats.Connect(h.Mesh.ClientURL(), nats.Name(fmt.Sprint("bench-worker-", w)))
					if err != nil {
						b.Fatal(err)
					}
					defer nc.Close()
					tools, s := c.open(ctx, b, nc, b.TempDir())
					if setup == nil {
						setup = s
					}
					cards, err := natsstore.NewClient(nc)
					if err != nil {
						b.Fatal(err)
					}
					reg, err := natsreg.NewClient(nc)
					if err != nil {
						b.Fatal(err)
					}
					rt, err := worker.New(nc, worker.Config{Store: cards, Registry: reg, Projects: []string{tooltest.Project},
						InstanceID: fmt.Sprint("w", w), Logger: tooltest.Quiet}, tools...)
					if err != nil {
						b.Fatal(err)
					}
					if err := rt.Start(ctx); err != nil {
						b.Fatal(err)
					}
					defer func() {
						sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
						defer scancel()
						_ = rt.Stop(sctx)
					}()
				}
				arg, err := setup(ctx)
				if err != nil {
					b.Fatal(err)
				}
				id, tok := "bench", ""
				if c.agent != nil {
					id, tok = c.agent(b)
				}
				ag := h.Agent(id, tok)
				call := func(i int) error {
					tool, args := c.calls(arg, i)
					raw, _ := json.Marshal(args)
					cctx, ccancel := context.WithTimeout(ctx, time.Minute)
					defer ccancel()
					out, err := ag.Call(cctx, agent.CallRequest{ToolName: tool, AgentTurnID: fmt.Sprint("bench-", i%8), Arguments: raw})
					if err != nil {
						return err
					}
					if out.Result.Status != card.StatusSuccess {
						return fmt.Errorf("%s: %s %+v", tool, out.Result.Status, out.Result.Error)
					}
					return nil
				}
				for i := range 8 { // warm-up: every tool's durable, the bucket
					if err := call(i); err != nil {
						b.Fatal(err)
					}
				}
				var next atomic.Int64
				var wg sync.WaitGroup
				errs := make(chan error, 8)
				b.ResetTimer()
				start := time.Now()
				for range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := int(next.Add(1)) - 1
							if i >= b.N {
								return
							}
							if err := call(i); err != nil {
								errs <- err
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
			})
		}
	}
}
