package mesh_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// TestStopWithAStuckCall: a mesh whose only call in flight ignores its
// cancellation stops anyway once the drain deadline and the worker's
// cancel grace have passed (`up` used to wait for such a call forever).
func TestStopWithAStuckCall(t *testing.T) {
	ctx := context.Background()
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	stuck := worker.Tool{Name: "stuck", Parameters: json.RawMessage(`{"type":"object"}`),
		Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
			close(entered)
			<-release // ignores ctx
			return worker.OK(map[string]bool{"ok": true}), nil
		}}
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quiet,
		Tools: []worker.Tool{stuck}, Worker: worker.Config{CancelGrace: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	content, _ := json.Marshal(card.ToolCallContent{ToolName: "stuck", Arguments: json.RawMessage(`{}`)})
	cc := &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: card.TypeToolCall, Content: content, ToolCallID: "call-1",
		CreatedAt: time.Now().UTC(), Metadata: card.Metadata{AgentID: "agent-s", AgentTurnID: "turn-s", TurnEpoch: 1}}
	if err := m.Cards().Put(ctx, cc); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(m.Conn())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(utp.Command{AgentID: "agent-s", AgentTurnID: "turn-s", TurnEpoch: 1, ToolCallID: "call-1",
		AfterExecution: card.Suspend, ToolCallCardID: cc.CardID})
	if _, err := js.Publish(ctx, "cg.v1r3.demo.main.cmd.tool.stuck", body); err != nil {
		t.Fatal(err)
	}
	<-entered
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := m.Stop(sctx); err != nil {
		t.Fatalf("Stop with a stuck call = %v, want a clean stop (the call abandoned for redelivery)", err)
	}
}
