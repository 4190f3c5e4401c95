// Package inboxtest is the conformance suite for inbox.Backend
// implementations: what the inbox service relies on of its storage
// (entries, duplicates, epochs and stale entries, acks and lazy acks, list
// paging and filters, pages followed while entries are added and acked,
// set_epoch rules, the wakeup mark). Every backend's tests call Run:
//
//	func TestConformance(t *testing.T) {
//		inboxtest.Run(t, func(t *testing.T) inbox.Backend {
//			b := open(t)
//			t.Cleanup(func() { b.Close(); check(t, b) }) // a consistency check
//			return b
//		})
//	}
//
// open must return a fresh, empty backend per call and register its own
// cleanup (close, then a consistency check of what the test left) on the
// t it is given: every test of the suite ends with that check.
package inboxtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// Report returns a valid report of agent-a for the call and turn, with a
// fresh tool_result_card_id (backends do not read cards).
func Report(turn, call string, epoch int64) *utp.Report {
	return &utp.Report{AgentID: "agent-a", AgentTurnID: turn, ToolCallID: call, TurnEpoch: epoch,
		ToolResultCardID: card.NewID(), Status: card.StatusSuccess, AfterExecution: card.Suspend, StepID: "s1", ToolName: "echo"}
}

// IDs returns the inbox ids of es, in order.
func IDs(es []inbox.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.InboxID
	}
	return out
}

// flusher is a backend that can commit its deferred writes on demand
// (boltinbox.DB); the suite flushes before it waits for a deferred write.
type flusher interface {
	Flush(ctx context.Context) error
}

// flush commits b's deferred writes when it can; the others write theirs
// on their own.
func flush(t *testing.T, b inbox.Backend) {
	t.Helper()
	if f, ok := b.(flusher); ok {
		must(t, f.Flush(context.Background()))
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Run runs the suite, each test on a backend from open.
func Run(t *testing.T, open func(t *testing.T) inbox.Backend) {
	t.Run("insert, duplicate, get, list", func(t *testing.T) {
		b := open(t)
		ctx := context.Background()
		e, created, err := b.Insert(ctx, "p1", "c1", Report("turn-1", "call-1", 1), "tp")
		must(t, err)
		if !created || e.State != inbox.StatePending || e.InboxID == "" || e.Traceparent != "tp" || e.ChannelID != "c1" {
			t.Fatalf("insert = %+v, %v", e, created)
		}
		again, created, err := b.Insert(ctx, "p1", "c1", Report("turn-1", "call-1", 1), "tp")
		must(t, err)
		if created || again.InboxID != e.InboxID {
			t.Fatalf("duplicate = %+v, %v; want the same entry", again, created)
		}
		got, err := b.Get(ctx, "p1", e.InboxID)
		must(t, err)
		if got.ToolCallID != "call-1" || got.State != inbox.StatePending {
			t.Fatalf("get = %+v", got)
		}
		if _, err := b.Get(ctx, "p2", e.InboxID); !errors.Is(err, inbox.ErrNotFound) {
			t.Fatalf("get from another project: err = %v, want inbox.ErrNotFound", err)
		}
		es, err := b.List(ctx, "p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StatePending, Limit: inbox.MaxList})
		must(t, err)
		if len(es) != 1 || es[0].InboxID != e.InboxID {
			t.Fatalf("list = %+v", es)
		}
		if es, err := b.List(ctx, "p2", inbox.ListQuery{AgentID: "agent-a", State: inbox.StateAll, Limit: inbox.MaxList}); err != nil || len(es) != 0 {
			t.Fatalf("list of another project = %+v, %v", es, err)
		}
		n, err := b.Pending(ctx)
		must(t, err)
		if n != 1 {
			t.Fatalf("pending = %d, want 1", n)
		}
	})

	t.Run("epochs and stale", func(t *testing.T) {
		b := open(t)
		ctx := context.Background()
		old, _, err := b.Insert(ctx, "p1", "c1", Report("turn-1", "call-1", 1), "")
		must(t, err)
		// A report never raises the epoch (only set_epoch does): an entry
		// of a lower epoch after one of epoch 3 is pending still.
		_, _, err = b.Insert(ctx, "p1", "c1", Report("turn-1", "call-2", 3), "")
		must(t, err)
		lower, created, err := b.Insert(ctx, "p1", "c1", Report("turn-1", "call-3", 2), "")
		must(t, err)
		if !created || lower.State != inbox.StatePending {
			t.Fatalf("epoch 2 after a report of epoch 3 (no set_epoch): %+v, %v; want pending", lower, created)
		}
		// set_epoch makes the pending entries of older epochs stale, and
		// never lowers the epoch.
		h, staled, err := b.SetEpoch(ctx, "p1", "turn-1", 4)
		must(t, err)
		if h != 4 || len(staled) != 3 {
			t.Fatalf("setEpoch 4 = %d, %d staled; want 4 and the three pending entries of older epochs", h, len(staled))
		}
		stale, created, err := b.Insert(ctx, "p1", "c1", Report("turn-1", "call-4", 2), "")
		must(t, err)
		if !created || stale.State != inbox.StateStale {
			t.Fatalf("older epoch after set_epoch 4: %+v, %v; want stale", stale, created)
		}
		got, err := b.Get(ctx, "p1", old.InboxID)
		must(t, err)
		if got.State != inbox.StateStale {
			t.Fatalf("entry of epoch 1 after set_epoch 4: %s", got.State)
		}
		h, staled, err = b.SetEpoch(ctx, "p1", "turn-1", 2)
		must(t, err)
		if h != 4 || len(staled) != 0 {
			t.Fatalf("setEpoch 2 = %d, %v; want 4 unchanged", h, staled)
		}
		if es, _ := b.List(ctx, "p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StatePending, Limit: inbox.MaxList}); len(es) != 0 {
			t.Fatalf("pending after set_epoch = %+v", es)
		}
		// A report of a huge epoch (any worker may report) does not raise
		// the turn's epoch: the turn's later results still wake.
		_, _, err = b.Insert(ctx, "p1", "c1", Report("turn-1", "call-5", math.MaxInt64), "")
		must(t, err)
		if e, created, err := b.Insert(ctx, "p1", "c1", Report("turn-1", "call-6", 4), ""); err != nil || !created {
			t.Fatalf("epoch 4 after a report of epoch MaxInt64: %+v, %v, %v; want a new pending entry", e, created, err)
		}
	})

	t.Run("a lazy ack counts once", func(t *testing.T) {
		b := open(t)
		ctx := context.Background()
		e, _, err := b.Insert(ctx, "p1", "c1", Report("turn-l", "call-1", 0), "")
		must(t, err)
		now := time.Now()
		for i, want := range []int{1, 0} {
			n, err := b.AckLater(ctx, "p1", []string{e.InboxID}, now, nil)
			must(t, err)
			if n != want {
				t.Fatalf("lazy ack %d of one entry = %d, want %d (only the first finds it pending)", i+1, n, want)
			}
		}
		if n, err := b.Ack(ctx, "p1", []string{e.InboxID}, now); err != nil || n != 0 {
			t.Fatalf("ack after the lazy ack = %d, %v; want 0", n, err)
		}
	})

	t.Run("a duplicate does not raise the epoch", func(t *testing.T) {
		b := open(t)
		ctx := context.Background()
		first, created, err := b.Insert(ctx, "p1", "c1", Report("turn-d", "call-1", 1), "")
		must(t, err)
		if !created {
			t.Fatalf("first report: %v", created)
		}
		// The same call reported again at a higher epoch (a re-made call's
		// worker re-reports the existing result with the new command's
		// epoch): a duplicate, whatever its epoch.
		dup, created, err := b.Insert(ctx, "p1", "c1", Report("turn-d", "call-1", 5), "")
		must(t, err)
		if created || dup.InboxID != first.InboxID {
			t.Fatalf("duplicate at epoch 5: %v, %s; want the first entry %s", created, dup.InboxID, first.InboxID)
		}
		e, created, err := b.Insert(ctx, "p1", "c1", Report("turn-d", "call-2", 2), "")
		must(t, err)
		if !created || e.State != inbox.StatePending {
			t.Fatalf("report at epoch 2 after a duplicate at 5: %v, %s; want a new pending entry (the turn's epoch is 1)", created, e.State)
		}
	})

	t.Run("ack all or none", func(t *testing.T) {
		b := open(t)
		ctx := context.Background()
		e1, _, _ := b.Insert(ctx, "p1", "c1", Report("turn-1", "call-1", 0), "")
		e2, _, _ := b.Insert(ctx, "p1", "c1", Report("turn-1", "call-2", 0), "")
		unknown := card.NewID()
		if _, err := b.Ack(ctx, "p1", []string{e1.InboxID, unknown}, time.Now()); !errors.Is(err, inbox.ErrNotFound) {
			t.Fatalf("ack with an unknown id: err = %v", err)
		}
		if got, _ := b.Get(ctx, "p1", e1.InboxID); got.State != inbox.StatePending {
			t.Fatalf("a failed ack changed %s to %s", e1.InboxID, got.State)
		}
		n, err := b.Ack(ctx, "p1", []string{e1.InboxID, e2.InboxID}, time.Now())
		must(t, err)
		if n != 2 {
			t.Fatalf("ack = %d, want 2", n)
		}
		n, err = b.Ack(ctx, "p1", []string{e1.InboxID}, time.Now())
		must(t, err)
		if n != 0 {
			t.Fatalf("re-ack = %d, want 0", n)
		}
		got, _ := b.Get(ctx, "p1", e1.InboxID)
		if got.State != inbox.StateAcked || got.AckedAt == nil {
			t.Fatalf("acked entry = %+v", got)
		}
		if es, _ := b.List(ctx, "p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StatePending, Limit: inbox.MaxList}); len(es) != 0 {
			t.Fatalf("pending after ack = %+v", es)
		}
		if n, _ := b.Pending(ctx); n != 0 {
			t.Fatalf("pending() after ack = %d", n)
		}
	})

	t.Run("lazy ack", func(t *testing.T) {
		b := open(t)
		ctx := context.Background()
		e, _, _ := b.Insert(ctx, "p1", "c1", Report("turn-1", "call-1", 0), "")
		done := make(chan error, 1)
		n, err := b.AckLater(ctx, "p1", []string{e.InboxID}, time.Now(), func(err error) { done <- err })
		must(t, err)
		if n != 1 {
			t.Fatalf("ackLater = %d, want 1", n)
		}
		if got, _ := b.Get(ctx, "p1", e.InboxID); got.State != inbox.StateAcked {
			t.Fatalf("read after a lazy ack: %s, want acked", got.State)
		}
		flush(t, b)
		must(t, <-done)
	})

	t.Run("wakeup mark once", func(t *testing.T) {
		b := open(t)
		ctx := context.Background()
		e, _, _ := b.Insert(ctx, "p1", "c1", Report("turn-1", "call-1", 0), "")
		firsts := make(chan bool, 2)
		for range 2 {
			b.MarkSentLater("p1", e.InboxID, time.Now(), func(first bool, err error) {
				if err != nil {
					t.Error(err)
				}
				firsts <- first
			})
		}
		flush(t, b)
		a, c := <-firsts, <-firsts
		if a == c {
			t.Fatalf("first = %v and %v, want exactly one", a, c)
		}
		got, _ := b.Get(ctx, "p1", e.InboxID)
		if got.WakeupSentAt == nil {
			t.Fatal("wakeup_sent_at not set")
		}
	})

	t.Run("list pages and filters", func(t *testing.T) {
		b := open(t)
		ctx := context.Background()
		var ids []string
		for i := range 5 {
			turn := "turn-a"
			if i%2 == 1 {
				turn = "turn-b"
			}
			e, _, err := b.Insert(ctx, "p1", "c1", Report(turn, fmt.Sprintf("call-%d", i), 0), "")
			must(t, err)
			ids = append(ids, e.InboxID)
		}
		page, err := b.List(ctx, "p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StateAll, Limit: 2})
		must(t, err)
		if len(page) != 2 || page[0].InboxID != ids[0] || page[1].InboxID != ids[1] {
			t.Fatalf("page 1 = %v, want %v", IDs(page), ids[:2])
		}
		page, err = b.List(ctx, "p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StateAll, Limit: 2, After: page[1].InboxID})
		must(t, err)
		if len(page) != 2 || page[0].InboxID != ids[2] || page[1].InboxID != ids[3] {
			t.Fatalf("page 2 = %v, want %v", IDs(page), ids[2:4])
		}
		turnB, err := b.List(ctx, "p1", inbox.ListQuery{AgentID: "agent-a", AgentTurnID: "turn-b", State: inbox.StateAll, Limit: inbox.MaxList})
		must(t, err)
		if len(turnB) != 2 || turnB[0].InboxID != ids[1] || turnB[1].InboxID != ids[3] {
			t.Fatalf("turn-b = %v", IDs(turnB))
		}
		if _, err := b.List(ctx, "p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StateAll, Limit: 2, After: card.NewID()}); !errors.Is(err, inbox.ErrNotFound) {
			t.Fatalf("after an unknown id: err = %v", err)
		}
		// One call of a turn: its entry, or none.
		calls := []struct {
			name        string
			agent, turn string
			call        string
			state       inbox.State
			want        []string
		}{
			{"the call", "agent-a", "turn-b", "call-3", inbox.StateAll, ids[3:4]},
			{"the call, pending", "agent-a", "turn-b", "call-3", inbox.StatePending, ids[3:4]},
			{"the call, acked", "agent-a", "turn-b", "call-3", inbox.StateAcked, nil},
			{"another turn's call", "agent-a", "turn-a", "call-3", inbox.StateAll, nil},
			{"an unknown call", "agent-a", "turn-b", "call-9", inbox.StateAll, nil},
			{"another agent", "agent-b", "turn-b", "call-3", inbox.StateAll, nil},
		}
		for _, tc := range calls {
			got, err := b.List(ctx, "p1", inbox.ListQuery{AgentID: tc.agent, AgentTurnID: tc.turn, ToolCallID: tc.call, State: tc.state, Limit: inbox.MaxList})
			must(t, err)
			if !slices.Equal(IDs(got), tc.want) {
				t.Fatalf("%s: %v, want %v", tc.name, IDs(got), tc.want)
			}
		}
	})

	t.Run("delete turn", func(t *testing.T) {
		b := open(t)
		ctx := context.Background()
		a1, _, err := b.Insert(ctx, "p1", "c1", Report("turn-1", "call-1", 1), "")
		must(t, err)
		a2, _, err := b.Insert(ctx, "p1", "c1", Report("turn-1", "call-2", 1), "")
		must(t, err)
		keep, _, err := b.Insert(ctx, "p1", "c1", Report("turn-2", "call-1", 1), "")
		must(t, err)
		other, _, err := b.Insert(ctx, "p2", "c1", Report("turn-1", "call-1", 1), "")
		must(t, err)
		_, err = b.Ack(ctx, "p1", []string{a1.InboxID}, time.Now())
		must(t, err)
		// A pending entry keeps the whole turn.
		if n, err := b.DeleteTurn(ctx, "p1", "turn-1"); !errors.Is(err, inbox.ErrPending) || n != 0 {
			t.Fatalf("delete a turn with a pending entry = %d, %v; want 0, inbox.ErrPending", n, err)
		}
		if _, err := b.Get(ctx, "p1", a1.InboxID); err != nil {
			t.Fatalf("the refused delete removed entry %s: %v", a1.InboxID, err)
		}
		// Acked and stale entries go.
		_, _, err = b.SetEpoch(ctx, "p1", "turn-1", 2) // a2 stale
		must(t, err)
		n, err := b.DeleteTurn(ctx, "p1", "turn-1")
		must(t, err)
		if n != 2 {
			t.Fatalf("delete turn-1 = %d entries, want 2", n)
		}
		for _, id := range []string{a1.InboxID, a2.InboxID} {
			if _, err := b.Get(ctx, "p1", id); !errors.Is(err, inbox.ErrNotFound) {
				t.Fatalf("get deleted entry %s: %v, want inbox.ErrNotFound", id, err)
			}
		}
		es, err := b.List(ctx, "p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StateAll, Limit: inbox.MaxList})
		must(t, err)
		if got := IDs(es); len(got) != 1 || got[0] != keep.InboxID {
			t.Fatalf("list after delete = %v, want only %s", got, keep.InboxID)
		}
		if _, err := b.Get(ctx, "p2", other.InboxID); err != nil {
			t.Fatalf("the same turn in another project: %v", err)
		}
		// The epoch went with the turn: a report of epoch 1 is pending
		// again, as in a turn never seen (and it makes a new entry: the
		// dedupe key went too).
		again, created, err := b.Insert(ctx, "p1", "c1", Report("turn-1", "call-1", 1), "")
		must(t, err)
		if !created || again.State != inbox.StatePending || again.InboxID == a1.InboxID {
			t.Fatalf("report after delete = %+v, created %v; want a new pending entry", again, created)
		}
		_, err = b.Ack(ctx, "p1", []string{again.InboxID}, time.Now())
		must(t, err)
		if n, err := b.DeleteTurn(ctx, "p1", "turn-1"); err != nil || n != 1 {
			t.Fatalf("delete turn-1 again = %d, %v; want 1, nil", n, err)
		}
		if n, err := b.DeleteTurn(ctx, "p1", "turn-never"); err != nil || n != 0 {
			t.Fatalf("delete a turn with no entries = %d, %v; want 0, nil", n, err)
		}
		if n, err := b.Pending(ctx); err != nil || n != 2 {
			t.Fatalf("pending after deletes = %d, %v; want 2 (turn-2 of p1, turn-1 of p2)", n, err)
		}
	})

	t.Run("concurrent duplicates make one entry", func(t *testing.T) {
		b := open(t)
		ctx := context.Background()
		const n = 8
		var wg sync.WaitGroup
		type res struct {
			id      string
			created bool
			err     error
		}
		got := make(chan res, n)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e, created, err := b.Insert(ctx, "p1", "c1", Report("turn-1", "call-1", 0), "")
				r := res{created: created, err: err}
				if e != nil {
					r.id = e.InboxID
				}
				got <- r
			}()
		}
		wg.Wait()
		close(got)
		news, id := 0, ""
		for r := range got {
			must(t, r.err)
			if id == "" {
				id = r.id
			}
			if r.id != id {
				t.Fatalf("two inbox ids for one call: %s and %s", id, r.id)
			}
			if r.created {
				news++
			}
		}
		if news != 1 {
			t.Fatalf("%d inserts made a new entry, want 1", news)
		}
	})

	runPaging(t, open)
}
