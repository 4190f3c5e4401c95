package inboxtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/inbox"
)

// pagingEntries is how many entries the paging tests start with.
const pagingEntries = 240

// runPaging runs the suite's paging tests: an agent's listing followed
// page by page while another goroutine adds entries and acks others. An
// entry that is in the listed state for the whole walk is listed exactly
// once, in creation order; an entry added or changed during the walk is
// listed at most once; no page repeats an entry of an earlier one.
func runPaging(t *testing.T, open func(t *testing.T) inbox.Backend) {
	tests := []struct {
		name string
		// state is the listed state.
		state inbox.State
		// ackedFirst: the entries acked before the walk starts (of the
		// first pagingEntries, by index).
		ackedFirst func(i int) bool
		// ackedDuring: the entries the other goroutine acks during the walk.
		ackedDuring func(i int) bool
		// steady: the entries in the listed state for the whole walk.
		steady func(i int) bool
	}{
		{
			name: "all", state: inbox.StateAll,
			ackedFirst:  func(i int) bool { return i%2 == 0 },
			ackedDuring: func(i int) bool { return i%3 == 1 },
			steady:      func(int) bool { return true },
		},
		{
			name: "pending", state: inbox.StatePending,
			ackedFirst:  func(i int) bool { return i%5 == 0 },
			ackedDuring: func(i int) bool { return i%3 == 1 },
			steady:      func(i int) bool { return i%5 != 0 && i%3 != 1 },
		},
		{
			name: "acked history", state: inbox.StateAcked,
			ackedFirst:  func(i int) bool { return i%10 != 9 },
			ackedDuring: func(i int) bool { return i%10 == 9 && i%20 == 19 },
			steady:      func(i int) bool { return i%10 != 9 },
		},
	}
	for _, tc := range tests {
		t.Run("pages of "+tc.name+" entries while entries are added and acked", func(t *testing.T) {
			b := open(t)
			ctx := context.Background()
			// agent-a's entries, ten per turn, with another agent's entries
			// of the same project in between.
			var ids []string
			for i := range pagingEntries {
				rep := Report(fmt.Sprintf("turn-%d", i/10), fmt.Sprintf("call-%d", i%10), 0)
				e, _, err := b.Insert(ctx, "p1", "c1", rep, "")
				must(t, err)
				ids = append(ids, e.InboxID)
				if i%4 == 0 {
					other := Report(fmt.Sprintf("turn-b%d", i), "call-1", 0)
					other.AgentID = "agent-b"
					_, _, err := b.Insert(ctx, "p1", "c1", other, "")
					must(t, err)
				}
			}
			var first []string
			for i, id := range ids {
				if tc.ackedFirst(i) {
					first = append(first, id)
				}
			}
			_, err := b.Ack(ctx, "p1", first, time.Now())
			must(t, err)
			flush(t, b)

			// The other goroutine: acks ackedDuring, one at a time, reports
			// each acked call again, and adds an entry of a new turn after
			// every ack, until the walk ends.
			var (
				mu    sync.Mutex
				added []string
			)
			stop := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- func() error {
					n := 0
					for i, id := range ids {
						if !tc.ackedDuring(i) {
							continue
						}
						select {
						case <-stop:
							return nil
						default:
						}
						if _, err := b.Ack(ctx, "p1", []string{id}, time.Now()); err != nil {
							return err
						}
						// The call reported again (a redelivery): the same
						// entry, which keeps its place in the listing.
						dup, created, err := b.Insert(ctx, "p1", "c1", Report(fmt.Sprintf("turn-%d", i/10), fmt.Sprintf("call-%d", i%10), 0), "")
						if err != nil {
							return err
						}
						if created || dup.InboxID != id {
							return fmt.Errorf("a second report of entry %s's call: %s, created %v; want the same entry", id, dup.InboxID, created)
						}
						e, _, err := b.Insert(ctx, "p1", "c1", Report("turn-new", fmt.Sprintf("call-%d", n), 0), "")
						if err != nil {
							return err
						}
						n++
						mu.Lock()
						added = append(added, e.InboxID)
						mu.Unlock()
					}
					return nil
				}()
			}()

			var listed []string
			q := inbox.ListQuery{AgentID: "agent-a", State: tc.state, Limit: 7}
			for pages := 0; ; pages++ {
				if pages > 2*pagingEntries {
					t.Fatalf("more than %d pages of 7: the walk does not end", pages)
				}
				page, err := b.List(ctx, "p1", q)
				must(t, err)
				for _, e := range page {
					if e.AgentID != "agent-a" {
						t.Fatalf("page %d lists entry %s of %s", pages, e.InboxID, e.AgentID)
					}
					if tc.state != inbox.StateAll && e.State != tc.state {
						t.Fatalf("page %d lists entry %s in state %s, want %s", pages, e.InboxID, e.State, tc.state)
					}
				}
				listed = append(listed, IDs(page)...)
				if len(page) < q.Limit {
					break
				}
				q.After = page[len(page)-1].InboxID
			}
			close(stop)
			must(t, <-done)

			seen := map[string]bool{}
			for _, id := range listed {
				if seen[id] {
					t.Fatalf("entry %s listed twice: %v", id, listed)
				}
				seen[id] = true
			}
			// The steady entries, all of them, in creation order.
			var want, got []string
			known := map[string]bool{}
			for i, id := range ids {
				known[id] = true
				if tc.steady(i) {
					want = append(want, id)
				}
			}
			for _, id := range listed {
				if slices.Contains(want, id) {
					got = append(got, id)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("steady entries listed %d (%v), want %d in creation order (%v)", len(got), got, len(want), want)
			}
			// The others: entries of the start in creation order, then
			// added ones, in the order they were added.
			mu.Lock()
			defer mu.Unlock()
			for _, id := range added {
				known[id] = true
			}
			order := append(slices.Clone(ids), added...)
			last := -1
			for _, id := range listed {
				if !known[id] {
					t.Fatalf("listed entry %s is none of agent-a's", id)
				}
				at := slices.Index(order, id)
				if at < last {
					t.Fatalf("entry %s listed after %s, created before it", id, order[last])
				}
				last = at
			}
		})
	}
}
