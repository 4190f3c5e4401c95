package natsauthz_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cedar-policy/cedar-go/types"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// BenchmarkRoundTripGate is one agent's echo round trip (sequential calls,
// fsync on) with the gate off and on.
func BenchmarkRoundTripGate(b *testing.B) {
	for _, gate := range []bool{false, true} {
		b.Run(fmt.Sprintf("gate=%v", gate), func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			cfg := mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Tools: []worker.Tool{echo.Tool()}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if gate {
				cfg.Auth = &mesh.AuthConfig{}
			}
			m, err := mesh.Start(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Stop(ctx)
			tok := ""
			if gate {
				act, _ := authz.ActionOf((&worker.Tool{Name: echo.Name}).Entry("demo"))
				if _, err := authz.SetupDemo(ctx, m.Auth().Store, m.Auth().Keys, []string{"demo"}, []types.EntityUID{act}, dir, time.Now()); err != nil {
					b.Fatal(err)
				}
				raw, err := os.ReadFile(filepath.Join(dir, authz.DemoMandateFile))
				if err != nil {
					b.Fatal(err)
				}
				tok = strings.TrimSpace(string(raw))
			}
			ac, err := agent.New(m.Conn(), agent.Config{Project: "demo", Channel: "main", AgentID: authz.DemoAgent, Mandate: tok})
			if err != nil {
				b.Fatal(err)
			}
			defer ac.Close()
			i := 0
			for b.Loop() {
				i++
				out, err := ac.Call(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: fmt.Sprintf("turn-%d", i%50), Arguments: json.RawMessage(`{"i":1}`)})
				if err != nil || out.Result.Status != card.StatusSuccess {
					b.Fatalf("%v %+v", err, out)
				}
			}
		})
	}
}
