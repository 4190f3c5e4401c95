package mesh_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/builtins"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/natsinbox"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestRestartWithPendingCommands stops a mesh while commands wait for a
// tool nobody serves, starts it again with the tool, and checks that every
// command completes: commands, cards and inbox survive the restart.
func TestRestartWithPendingCommands(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	// Register echo so the commands are valid, but do not serve it yet.
	if _, err := m.Registry().Put(ctx, (&worker.Tool{Name: echo.Name, Parameters: json.RawMessage(echo.Parameters), Handler: nil}).Entry("demo")); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(m.Conn())
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	calls := map[string]bool{}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("call-%d", i)
		calls[id] = true
		content, _ := json.Marshal(card.ToolCallContent{ToolName: "echo", Arguments: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
		cc := &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: card.TypeToolCall, Content: content, ToolCallID: id,
			CreatedAt: time.Now().UTC(), Metadata: card.Metadata{AgentID: "agent-r", AgentTurnID: "turn-r", TurnEpoch: 1}}
		if err := m.Cards().Put(ctx, cc); err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(utp.Command{AgentID: "agent-r", AgentTurnID: "turn-r", TurnEpoch: 1, ToolCallID: id,
			AfterExecution: card.Suspend, ToolCallCardID: cc.CardID})
		if _, err := js.Publish(ctx, "cg.v1r3.demo.main.cmd.tool.echo", body); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	m2, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet, Tools: []worker.Tool{echo.Tool()}})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Stop(ctx)
	ic, err := natsinbox.NewClient(m2.Conn())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		entries, err := ic.List(ctx, "demo", inbox.ListQuery{AgentID: "agent-r", State: inbox.StateAll})
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) == n {
			for _, e := range entries {
				if !calls[e.ToolCallID] || e.Status != card.StatusSuccess {
					t.Fatalf("entry %+v", e)
				}
				rc, err := m2.Cards().Get(ctx, "demo", e.ToolResultCardID)
				if err != nil {
					t.Fatal(err)
				}
				if tr, _ := rc.ToolResult(); tr == nil || tr.Status != card.StatusSuccess {
					t.Fatalf("result card %s", rc.Content)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after restart %d of %d commands completed", len(entries), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestStartValidates(t *testing.T) {
	ctx := context.Background()
	if _, err := mesh.Start(ctx, mesh.Config{}); err == nil {
		t.Fatal("Start without DataDir succeeded")
	}
	if _, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "nonsense"}); err == nil {
		t.Fatal("Start with a bad listen address succeeded")
	}
	// A second mesh on the same data directory is refused (locked files),
	// and the first keeps working.
	dir := t.TempDir()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop(ctx)
	if m2, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet}); err == nil {
		m2.Stop(ctx)
		t.Fatal("a second mesh on the same data directory started")
	}
	if !m.Conn().IsConnected() || m.Conn().Status() != nats.CONNECTED {
		t.Fatal("first mesh lost its connection")
	}
}

// TestAgentCallsBuiltin: a Go agent lists the project's tools through the
// list_tools PMO built-in (package builtins, started by every mesh), end to
// end; a tool's declared risk level and confirmation policy are shown as
// registered (the mesh acts on neither).
func TestAgentCallsBuiltin(t *testing.T) {
	ctx := context.Background()
	parked := echo.Tool()
	parked.Name, parked.Options = "parked", registry.Options{RiskLevel: registry.RiskHigh, Confirmation: registry.ConfirmWhenMultiple}
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quiet, Tools: []worker.Tool{echo.Tool(), parked}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop(ctx)
	ac, err := agent.New(m.Conn(), agent.Config{Project: "demo", Channel: "main", AgentID: "lister"})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := ac.Call(cctx, agent.CallRequest{ToolName: "list_tools", AgentTurnID: "turn-l"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Result.Status != card.StatusSuccess || !strings.Contains(string(out.Result.Result), `"name":"echo"`) {
		t.Fatalf("list_tools = %s %s", out.Result.Status, out.Result.Result)
	}
	var list struct {
		Tools []builtins.ToolInfo `json:"tools"`
	}
	if err := json.Unmarshal(out.Result.Result, &list); err != nil {
		t.Fatal(err)
	}
	got := map[string]builtins.ToolInfo{}
	for _, ti := range list.Tools {
		got[ti.Name] = ti
	}
	if p := got["parked"]; p.RiskLevel != registry.RiskHigh || p.Confirmation != string(registry.ConfirmWhenMultiple) {
		t.Errorf("list_tools shows parked as %+v, want risk_level HIGH, confirmation when_multiple", p)
	}
	for _, name := range []string{registry.BuiltinListTools, registry.BuiltinCancelToolCall, registry.BuiltinMandateQuery} {
		if !got[name].Builtin {
			t.Errorf("list_tools lacks built-in %s: %s", name, out.Result.Result)
		}
	}
}
