package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/natsinbox"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/services/echo"
)

// heldAcks is the agent's inbox client with its lazy acks held until
// release is closed.
type heldAcks struct {
	inbox.API
	release chan struct{}
}

func (h *heldAcks) AckLazy(ctx context.Context, project string, ids ...string) (int, error) {
	select {
	case <-h.release:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return h.API.AckLazy(ctx, project, ids...)
}

// TestLazyAckInBackground: Call returns its Outcome without waiting for
// the answer to its lazy ack; Flush and Resume wait for the client's acks
// in flight; once answered the entry is acknowledged; Close waits for the
// acks still in flight.
func TestLazyAckInBackground(t *testing.T) {
	e := startMesh(t)
	ctx := ctxT(t)
	ic, err := natsinbox.NewAgentClient(e.nc, "agent-bg", svc.WithChannel(channel))
	if err != nil {
		t.Fatal(err)
	}
	held := &heldAcks{API: ic, release: make(chan struct{})}
	c, err := agent.New(e.nc, agent.Config{Project: project, Channel: channel, AgentID: "agent-bg", Inbox: held, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Call(ctx, agent.CallRequest{ToolName: echo.Name, Arguments: json.RawMessage(`{"a":1}`), AgentTurnID: "turn-bg"})
	if err != nil {
		t.Fatalf("Call with its ack held: %v", err) // a Call waiting for the answer would end with ctx
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Flush(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Flush with the ack in flight and a canceled ctx = %v, want context.Canceled", err)
	}
	if _, err := c.Resume(done, "turn-bg"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Resume with the ack in flight and a canceled ctx = %v, want context.Canceled", err)
	}
	if e, err := ic.Get(ctx, project, out.Wakeup.InboxID); err != nil || e.State != inbox.StatePending {
		t.Fatalf("entry with its ack held = %+v, %v; want pending", e, err)
	}
	close(held.release)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if e, err := ic.Get(ctx, project, out.Wakeup.InboxID); err != nil || e.State != inbox.StateAcked {
		t.Fatalf("entry after Flush = %+v, %v; want acked", e, err)
	}
	st, err := c.Resume(ctx, "turn-bg")
	if err != nil || len(st.Finished) != 1 || len(st.Unconsumed) != 0 {
		t.Fatalf("Resume after the ack = %+v, %v; want one finished call", st, err)
	}

	// Close waits for an ack still in flight.
	held2 := &heldAcks{API: ic, release: make(chan struct{})}
	c2, err := agent.New(e.nc, agent.Config{Project: project, Channel: channel, AgentID: "agent-bg", Inbox: held2, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	out2, err := c2.Call(ctx, agent.CallRequest{ToolName: echo.Name, Arguments: json.RawMessage(`{"a":2}`), AgentTurnID: "turn-bg"})
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- c2.Close() }()
	close(held2.release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if e, err := ic.Get(ctx, project, out2.Wakeup.InboxID); err != nil || e.State != inbox.StateAcked {
		t.Fatalf("entry after Close = %+v, %v; want acked (Close waits for the acks in flight)", e, err)
	}
}
