package worker_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// lateCardStore is the worker's CardStore, counting StartCalls; on the
// first Release (the worker gives its claim back before it leaves a
// command without its card for redelivery) it calls onRelease before it
// answers, so what onRelease writes is there for the redelivery.
type lateCardStore struct {
	*boltstore.Store
	starts    atomic.Int32
	once      sync.Once
	onRelease func()
}

func (s *lateCardStore) StartCall(ctx context.Context, req cardstore.StartCallRequest) (*cardstore.StartCallResult, error) {
	s.starts.Add(1)
	return s.Store.StartCall(ctx, req)
}

func (s *lateCardStore) Release(ctx context.Context, projectID, key, holder string) error {
	err := s.Store.Release(ctx, projectID, key, holder)
	if s.onRelease != nil {
		s.once.Do(s.onRelease)
	}
	return err
}

// TestCommandBeforeItsCard: a command whose tool.call card is missing is
// left for redelivery (its claim given back, so no take-over is counted)
// while its delivery count is below worker.MissingCardDeliveries: a card
// written between deliveries (the agent's resent dispatch) makes the call
// run, once, with no result from the first delivery; a card that never
// comes fails the call bad_request, as before, after the last delivery.
func TestCommandBeforeItsCard(t *testing.T) {
	tests := []struct {
		name       string
		late       bool // the card is written after the first delivery
		wantStatus card.Status
		wantStarts int32
	}{
		{"card written between deliveries", true, card.StatusSuccess, 2},
		{"card never written", false, card.StatusFailed, worker.MissingCardDeliveries},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			tool := worker.Tool{Name: "count", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
				runs.Add(1)
				return worker.OK(map[string]bool{"ok": true}), nil
			}}
			c := newCall("count", `{}`)
			var st *lateCardStore
			wrap := func(b *boltstore.Store) cardstore.Store {
				st = &lateCardStore{Store: b}
				if tc.late {
					st.onRelease = func() {
						if err := b.Put(context.Background(), c.card); err != nil {
							t.Error(err)
						}
					}
				}
				return st
			}
			h := newHarnessWrapped(t, worker.Config{MaxDeliveries: 1}, nil, wrap, tool)
			h.publish(toolSubject("count"), c.command("count"), nil)
			rep, _ := h.awaitReport(c.id)
			_, tr := h.result(rep)
			if rep.Status != tc.wantStatus {
				t.Fatalf("report %+v (error %+v), want %s", rep, tr.Error, tc.wantStatus)
			}
			if got := st.starts.Load(); got != tc.wantStarts {
				t.Fatalf("%d deliveries started the call, want %d", got, tc.wantStarts)
			}
			if tc.late {
				if runs.Load() != 1 {
					t.Fatalf("the handler ran %d times, want once", runs.Load())
				}
				return
			}
			if runs.Load() != 0 || tr.Error == nil || tr.Error.Code != card.CodeBadRequest || !strings.Contains(tr.Error.Message, "no such card") {
				t.Fatalf("card never written: %d runs, error %+v; want bad_request naming the missing card, no run", runs.Load(), tr.Error)
			}
		})
	}
}
