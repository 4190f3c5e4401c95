package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// TestCallRequestMetadata: extra metadata keys reach the tool.call card;
// keys the client writes itself are refused, nothing is dispatched.
func TestCallRequestMetadata(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Tools: []worker.Tool{echo.Tool()},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	c, err := agent.New(m.Conn(), agent.Config{Project: "demo", AgentID: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tests := []struct {
		name    string
		md      map[string]json.RawMessage
		invalid bool
	}{
		{"extra key", map[string]json.RawMessage{"mcp": json.RawMessage(`{"request_id":"7"}`)}, false},
		{"typed field", map[string]json.RawMessage{"agent_id": json.RawMessage(`"x"`)}, true},
		{"mandate", map[string]json.RawMessage{agent.MetadataMandate: json.RawMessage(`"x"`)}, true},
		{"not JSON", map[string]json.RawMessage{"mcp": json.RawMessage(`{`)}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.Call(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: "t-md", Metadata: tc.md})
			if tc.invalid {
				if !errors.Is(err, agent.ErrInvalid) {
					t.Fatalf("err = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cc, err := m.Cards().Get(ctx, "demo", out.Call.ToolCallCardID)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(cc.Metadata.Extra["mcp"]); got != `{"request_id":"7"}` {
				t.Fatalf("metadata.mcp = %s", got)
			}
		})
	}
}
