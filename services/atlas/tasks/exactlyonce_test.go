package tasks_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/internal/atlastest"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
	"github.com/utpmesh/utpmesh/services/atlas/tasks"
)

// receiptOnceFails is the CardStore the ATLAS services see, failing their
// first receipt write the way a CardStore briefly without a quorum does (a
// follower kill): after the task is committed.
type receiptOnceFails struct {
	cardstore.Store
	failed atomic.Bool
}

func (s *receiptOnceFails) Put(ctx context.Context, cards ...*card.Card) error {
	for _, c := range cards {
		if c.Type == receipts.CardType && s.failed.CompareAndSwap(false, true) {
			return fmt.Errorf("cardstore: put: %w", context.DeadlineExceeded)
		}
	}
	return s.Store.Put(ctx, cards...)
}

// TestCommittedCreateIsNotReportedFailed: a TASK_CREATE whose task is
// committed but whose receipt cannot be written is not reported failed (it
// used to end failed/upstream_unavailable, and an agent that retried under
// a new id created the task twice): the call runs again, answers from its
// record and writes the receipt. Calling again with the same tool_call_id
// returns the same task; exactly one task exists, with one receipt entry.
func TestCommittedCreateIsNotReportedFailed(t *testing.T) {
	for _, st := range []string{atlas.StateBolt, atlas.StateJetStream} {
		t.Run(st, func(t *testing.T) {
			build := func(d atlas.Deps) ([]worker.Tool, error) { d.State = st; return tasks.Build(d) }
			cards := &receiptOnceFails{}
			h := atlastest.StartWrapped(t, context.Background(), t.TempDir(), func(s cardstore.Store) cardstore.Store {
				cards.Store = s
				return cards
			}, build)
			turn := h.Turn()
			args := map[string]any{"title": "Buy dog food", "tags": []string{"pets"}}
			first := h.CallID(turn, "create-1", tasks.ToolCreate, args)
			if first.Status != card.StatusSuccess {
				t.Fatalf("create whose receipt write failed once: %s %+v, want success", first.Status, first.Error)
			}
			if !cards.failed.Load() {
				t.Fatal("the receipt write never failed: the test injected nothing")
			}
			again := h.CallID(turn, "create-1", tasks.ToolCreate, args)
			if again.Status != card.StatusSuccess || atlastest.Str(again.Value, "task_id") != atlastest.Str(first.Value, "task_id") {
				t.Fatalf("same tool_call_id again: %s %v, want the first call's task %s", again.Status, again.Value, atlastest.Str(first.Value, "task_id"))
			}
			list := h.OK(turn, tasks.ToolList, map[string]any{})
			if list["total"] != float64(1) {
				t.Fatalf("tasks after a create, its retry and a repeat = %v, want exactly 1", list["total"])
			}
			n := 0
			for _, tc := range h.Receipt(turn).ToolCalls {
				if tc.ToolCallID == "create-1" {
					n++
					if tc.Status != receipts.StatusOK {
						t.Errorf("receipt entry of the create: status %s, want OK", tc.Status)
					}
				}
			}
			if n != 1 {
				t.Fatalf("receipt entries of the create = %d, want 1", n)
			}
		})
	}
}
