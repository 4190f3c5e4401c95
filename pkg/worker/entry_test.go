package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// entryStore is the harness's CardStore saying, as a node's store does
// (cardstore.EntryPutter), whether a result's put stored the call's inbox
// entry: entry is its answer for every put.
type entryStore struct {
	cardstore.Store
	entry bool
	puts  atomic.Int64
}

var _ cardstore.EntryPutter = (*entryStore)(nil)

func (s *entryStore) PutWithEntry(ctx context.Context, cards ...*card.Card) (bool, error) {
	s.puts.Add(1)
	if err := s.Store.Put(ctx, cards...); err != nil {
		return false, err
	}
	return s.entry, nil
}

// TestResultEntryStoredSkipsReport: a result whose put stored the call's
// inbox entry is not reported, and its command is acknowledged; one whose
// put did not say so (a store without the inbox, a result the inbox makes
// no entry for) is reported as ever, before the ack.
func TestResultEntryStoredSkipsReport(t *testing.T) {
	for _, tc := range []struct {
		name   string
		entry  bool
		report bool
	}{
		{"entry stored with the result", true, false},
		{"no entry with the result", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &entryStore{entry: tc.entry}
			h := newHarnessWrapped(t, worker.Config{}, nil, func(b *boltstore.Store) cardstore.Store {
				st.Store = b
				return st
			})
			c := h.writeCall("echo", `{"x":1}`)
			h.publish(toolSubject("echo"), c.command("echo"), nil)
			if tc.report {
				r, _ := h.awaitReport(c.id)
				if _, tr := h.result(r); tr.Status != card.StatusSuccess {
					t.Fatalf("reported result %+v, want success", tr)
				}
			}
			// The command is acknowledged once the result is written (and,
			// without an entry, reported): nothing left for the consumer.
			awaitAcked(t, h, "echo")
			res, err := h.store.FindToolResult(context.Background(), project, c.turn, c.id)
			if err != nil || res == nil {
				t.Fatalf("the call's result: %v", err)
			}
			if n := st.puts.Load(); n != 1 {
				t.Fatalf("%d PutWithEntry calls, want the result's one", n)
			}
			must(t, h.nc.Flush())
			if !tc.report {
				select {
				case m := <-h.reports:
					t.Fatalf("a report was sent for a result whose entry was stored: %s", m.Data)
				default:
				}
			}
		})
	}
}

// awaitAcked waits until the tool's consumer has no command pending or
// awaiting its ack.
func awaitAcked(t *testing.T, h *harness, tool string) {
	t.Helper()
	cons, err := h.js.Consumer(context.Background(), streams.CommandStream(ver), streams.ToolConsumer(tool))
	must(t, err)
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := cons.Info(context.Background())
		must(t, err)
		if info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Consumer > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %s command is not acknowledged: %d pending, %d awaiting ack", tool, info.NumPending, info.NumAckPending)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
