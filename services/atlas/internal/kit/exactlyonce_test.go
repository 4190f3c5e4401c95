package kit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// unknownOnce is a group's state whose first commit ends with
// state.ErrUnknownOutcome, as the replicated state's does when its commit
// request times out: stored says whether that commit was in fact stored.
type unknownOnce struct {
	state.Store
	stored bool
	done   atomic.Bool
}

func (u *unknownOnce) Update(ctx context.Context, fn func(state.Tx) error) error {
	if u.done.CompareAndSwap(false, true) {
		if u.stored {
			if err := u.Store.Update(ctx, fn); err != nil {
				return err
			}
		}
		return fmt.Errorf("%w: injected: commit timed out", state.ErrUnknownOutcome)
	}
	return u.Store.Update(ctx, fn)
}

// TestUnknownCommitOutcomeRetries: a commit whose outcome is unknown
// neither fails the call nor applies it twice. The call is retried
// (worker.ErrRetryLater); the retry answers from the call record when the
// commit was stored, and runs the call when it was not. Either way exactly
// one object exists and every answer is the same.
func TestUnknownCommitOutcomeRetries(t *testing.T) {
	for _, stored := range []bool{true, false} {
		t.Run(fmt.Sprintf("stored=%v", stored), func(t *testing.T) {
			dir := t.TempDir()
			cards, err := boltstore.Open(filepath.Join(dir, "cards.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cards.Close() })
			nc := meshtest.Conn(t, meshtest.NATS(t))
			s, err := New("tasks", atlas.Deps{NC: nc, Store: cards, DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			inj := &unknownOnce{Store: s.st, stored: stored}
			s.st = inj
			var runs atomic.Int32
			tools, err := s.Tools(Spec{Name: "MAKE", Params: `{"type":"object"}`, Run: func(x *Exec) (Outcome, error) {
				runs.Add(1)
				id := x.ID("obj", 0)
				if _, err := toolkit.PutNew(x.Bucket("objs"), id, map[string]string{"id": id}, x.ToolCallID); err != nil {
					return Outcome{}, err
				}
				return Outcome{Result: map[string]string{"id": id}}, nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			call := testCall(t, cards, "turn-1", "call-1")
			ctx := context.Background()
			if _, err := tools[0].Handler(ctx, call); !errors.Is(err, worker.ErrRetryLater) {
				t.Fatalf("call whose commit outcome is unknown = %v, want worker.ErrRetryLater", err)
			}
			first, err := tools[0].Handler(ctx, call) // the redelivery
			if err != nil {
				t.Fatalf("retried call: %v", err)
			}
			again, err := tools[0].Handler(ctx, call) // one more redelivery
			if err != nil || fmt.Sprint(again.Value) != fmt.Sprint(first.Value) {
				t.Fatalf("repeat = %v, %v; want %v", again.Value, err, first.Value)
			}
			// Stored: the first attempt ran it and the retries answer
			// from the record. Not stored (the injected commit ran
			// nothing): the first retry runs it.
			if runs.Load() != 1 {
				t.Errorf("Run ran %d times, want once", runs.Load())
			}
			n := 0
			if err := s.st.View(ctx, func(tx state.Tx) error {
				return tx.Bucket(call.ProjectID, "objs").Scan("", false, func(string, []byte) error { n++; return nil })
			}); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Fatalf("objects = %d, want exactly 1", n)
			}
		})
	}
}

// testCall writes a tool.call card and returns the worker call of it.
func testCall(t *testing.T, st *boltstore.Store, turn, id string) *worker.Call {
	t.Helper()
	cc := &card.Card{
		CardID: card.NewID(), ProjectID: "demo", Type: card.TypeToolCall, AuthorID: "agent",
		Content: []byte(`{"tool_name":"MAKE","arguments":{},"target_subject":"x"}`), ToolCallID: id, CreatedAt: time.Now().UTC(),
		Metadata: card.Metadata{AgentID: "agent", AgentTurnID: turn, TurnEpoch: 1, StepID: "step-" + id, ToolCallID: id},
	}
	if err := st.Put(context.Background(), cc); err != nil {
		t.Fatal(err)
	}
	return &worker.Call{Version: "v1r3", ProjectID: "demo", ChannelID: "default", ToolName: "MAKE",
		Command:  utp.Command{AgentID: "agent", AgentTurnID: turn, ToolCallID: id, TurnEpoch: 1},
		CallCard: cc, Arguments: []byte(`{}`)}
}
