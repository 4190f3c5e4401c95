package atlas_test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/calendar"
	"github.com/utpmesh/utpmesh/services/atlas/internal/atlastest"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
	"github.com/utpmesh/utpmesh/services/atlas/utility"
)

// transitionOnceFails is the CardStore the ATLAS services see, failing
// the first transition receipt (a confirmed action's) after the action
// committed.
type transitionOnceFails struct {
	cardstore.Store
	failed atomic.Bool
}

func (s *transitionOnceFails) Put(ctx context.Context, cards ...*card.Card) error {
	for _, c := range cards {
		if c.Type == receipts.CardType && bytes.Contains(c.Content, []byte(`"kind":"transition"`)) && s.failed.CompareAndSwap(false, true) {
			return fmt.Errorf("cardstore: put: %w", context.DeadlineExceeded)
		}
	}
	return s.Store.Put(ctx, cards...)
}

// TestConfirmedActionIsNotReportedFailed: an ATLAS_CONFIRM whose action
// ran but whose transition receipt could not be written is retried, not
// failed (it used to end upstream_unavailable): the repeat gets the same
// resolution, the receipt is written, and the action ran once.
func TestConfirmedActionIsNotReportedFailed(t *testing.T) {
	for _, st := range []string{atlas.StateBolt, atlas.StateJetStream} {
		t.Run(st, func(t *testing.T) {
			with := func(b atlastest.Builder) atlastest.Builder {
				return func(d atlas.Deps) ([]worker.Tool, error) { d.State = st; return b(d) }
			}
			cards := &transitionOnceFails{}
			h := atlastest.StartWrapped(t, context.Background(), t.TempDir(), func(s cardstore.Store) cardstore.Store {
				cards.Store = s
				return cards
			}, with(calendar.Build), with(utility.Build))
			turn := h.Turn()
			p := h.OK(turn, calendar.ToolCreateBlocks, map[string]any{"date": "2024-01-15", "blocks": []map[string]any{
				{"title": "Deep Work", "start": "14:00", "end": "16:00", "type": "focus"}}})
			id := pending(t, p)
			ok := h.OK(h.Turn(), utility.ToolConfirm, map[string]any{"confirmation_id": id})
			if ok["status"] != receipts.StatusOK || !cards.failed.Load() {
				t.Fatalf("confirm whose transition receipt failed once = %v (injected: %v), want OK", ok, cards.failed.Load())
			}
			day := h.OK(turn, calendar.ToolGetDay, map[string]any{"date": "2024-01-15"})
			if n := len(day["blocks"].([]any)); n != 1 {
				t.Fatalf("blocks after the confirm = %d, want 1", n)
			}
			var status string
			for _, tc := range h.Receipt(turn).ToolCalls {
				if tc.ToolName == calendar.ToolCreateBlocks {
					status = tc.Status
				}
			}
			if status != receipts.StatusOK {
				t.Fatalf("the original call's receipt status = %q, want OK (its transition written)", status)
			}
		})
	}
}
