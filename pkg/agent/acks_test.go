package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
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

// countedAcks is the agent's inbox client recording the ids of each lazy
// ack request, holding the first one until release is closed, and failing
// every request of more than one id whole when failBatches is set (as the
// inbox does when one of them has no entry).
type countedAcks struct {
	inbox.API
	release     chan struct{}
	failBatches bool

	mu       sync.Mutex
	requests [][]string
}

func (h *countedAcks) AckLazy(ctx context.Context, project string, ids ...string) (int, error) {
	h.mu.Lock()
	h.requests = append(h.requests, slices.Clone(ids))
	first := len(h.requests) == 1
	h.mu.Unlock()
	if first {
		select {
		case <-h.release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if h.failBatches && len(ids) > 1 {
		return 0, inbox.NotFound(project, ids[len(ids)-1:])
	}
	return h.API.AckLazy(ctx, project, ids...)
}

func (h *countedAcks) sizes() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n []int
	for _, r := range h.requests {
		n = append(n, len(r))
	}
	return n
}

// TestLazyAcksBatched: the acks of Calls that end while an ack request is
// in flight leave together in the next request; an ack request that fails
// whole for a missing entry is sent again id by id; after Flush every
// entry is acknowledged either way.
func TestLazyAcksBatched(t *testing.T) {
	e := startMesh(t)
	ctx := ctxT(t)
	ic, err := natsinbox.NewAgentClient(e.nc, "agent-batch", svc.WithChannel(channel))
	if err != nil {
		t.Fatal(err)
	}
	for _, failBatches := range []bool{false, true} {
		held := &countedAcks{API: ic, release: make(chan struct{}), failBatches: failBatches}
		c, err := agent.New(e.nc, agent.Config{Project: project, Channel: channel, AgentID: "agent-batch", Inbox: held, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for i := range 6 {
			out, err := c.Call(ctx, agent.CallRequest{ToolName: echo.Name, Arguments: json.RawMessage(`{"a":1}`), AgentTurnID: "turn-batch"})
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			ids = append(ids, out.Wakeup.InboxID)
		}
		close(held.release)
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		want := []int{1, 5} // the first call's ack, then the five queued behind it
		if failBatches {
			want = []int{1, 5, 1, 1, 1, 1, 1}
		}
		if got := held.sizes(); !slices.Equal(got, want) {
			t.Errorf("failBatches=%v: ack requests of %v ids, want %v", failBatches, got, want)
		}
		for _, id := range ids {
			if en, err := ic.Get(ctx, project, id); err != nil || en.State != inbox.StateAcked {
				t.Errorf("failBatches=%v: entry %s after Flush = %+v, %v; want acked", failBatches, id, en, err)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
