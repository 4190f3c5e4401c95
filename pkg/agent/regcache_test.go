package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/registry/natsreg"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/services/echo"
)

// countingRegistry counts Get calls on a real registry client.
type countingRegistry struct {
	registry.Registry
	gets atomic.Int64
}

func (r *countingRegistry) Get(ctx context.Context, p, tool string) (*registry.Entry, error) {
	r.gets.Add(1)
	return r.Registry.Get(ctx, p, tool)
}

// TestRegistryCache: within the TTL Call reads a tool's entry once; with
// the cache off it reads it every call (a raw-commands client: a
// dispatching one asks the mesh, which reads the registry itself); an unknown tool is never cached
// (registering it afterwards works at once).
func TestRegistryCache(t *testing.T) {
	e := startMesh(t)
	for _, tc := range []struct {
		name      string
		ttl       time.Duration
		wantReads int64
	}{
		{"cached", time.Hour, 1},
		{"off", -1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner, err := natsreg.NewClient(e.nc, svc.WithChannel(channel))
			if err != nil {
				t.Fatal(err)
			}
			reg := &countingRegistry{Registry: inner}
			c, err := agent.New(e.nc, agent.Config{Project: project, Channel: channel, AgentID: "agent-cache-" + tc.name,
				Logger: quiet, Registry: reg, RegistryCacheTTL: tc.ttl, RawCommands: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := ctxT(t)
			for range 3 {
				if _, err := c.Call(ctx, agent.CallRequest{ToolName: echo.Name, Arguments: json.RawMessage(`{}`), AgentTurnID: "turn-cache-" + tc.name}); err != nil {
					t.Fatal(err)
				}
			}
			if got := reg.gets.Load(); got != tc.wantReads {
				t.Fatalf("registry reads for 3 calls = %d, want %d", got, tc.wantReads)
			}
			for range 2 {
				_, err := c.Call(ctx, agent.CallRequest{ToolName: "no_such_tool", Arguments: json.RawMessage(`{}`), AgentTurnID: "turn-cache-" + tc.name})
				if !errors.Is(err, agent.ErrUnknownTool) {
					t.Fatalf("call of an unknown tool: %v, want ErrUnknownTool", err)
				}
			}
			if got := reg.gets.Load(); got != tc.wantReads+2 {
				t.Fatalf("registry reads after 2 unknown-tool calls = %d, want %d (failures are not cached)", got, tc.wantReads+2)
			}
		})
	}
}
