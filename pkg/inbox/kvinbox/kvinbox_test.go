package kvinbox

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/jskv/jskvtest"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/inboxtest"
)

// openOn makes a fresh bucket on js and ends the test with the backend
// closed and the bucket checked (KV.Check).
func openOn(t *testing.T, js jetstream.JetStream, replicas int) *KV {
	t.Helper()
	bk, err := OpenBucket(context.Background(), js, fmt.Sprintf("inbox_%d", time.Now().UnixNano()), replicas)
	must(t, err)
	b := New(bk)
	t.Cleanup(func() {
		must(t, b.Close())
		if err := b.Check(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return b
}

func openR1(t *testing.T) *KV {
	srv := meshtest.NATS(t)
	js, err := jetstream.New(meshtest.Conn(t, srv))
	must(t, err)
	return openOn(t, js, 1)
}

// TestConformance runs the inbox backend suite on a bucket on one server.
func TestConformance(t *testing.T) {
	inboxtest.Run(t, func(t *testing.T) inbox.Backend { return openR1(t) })
}

// TestConformanceR3 runs the suite on a bucket replicated on three
// servers.
func TestConformanceR3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := jskvtest.Start(t)
	inboxtest.Run(t, func(t *testing.T) inbox.Backend { return openOn(t, c.JetStream(t, 0), 3) })
}

// TestInsertRepairsAHalfInsert: an inbox that stopped after creating a
// call's dedupe key (before the entry) leaves the key naming an entry that
// does not exist; the report's redelivery finishes the insert with that id.
func TestInsertRepairsAHalfInsert(t *testing.T) {
	b := openR1(t)
	ctx := context.Background()
	r := inboxtest.Report("turn-1", "call-1", 0)
	id := card.NewID()
	_, err := b.kv.Create(ctx, "c.p1."+hashToken("p1", r.AgentTurnID, r.ToolCallID), []byte(id))
	must(t, err)
	e, created, err := b.Insert(ctx, "p1", "c1", r, "")
	must(t, err)
	if e.InboxID != id || !created {
		t.Fatalf("insert after a half insert = %s, created %v; want the id the first one chose (%s), created", e.InboxID, created, id)
	}
	es, err := b.List(ctx, "p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StatePending, Limit: inbox.MaxList})
	must(t, err)
	if len(es) != 1 || es[0].InboxID != id {
		t.Fatalf("pending = %v", inboxtest.IDs(es))
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// olderBucket writes 30 entries of agent-a the way the version before
// the listing walk left them: the same keys, and its acks deleted the
// pending key, leaving a delete marker. It returns the entries' ids, the
// acked ones' and the pending ones', each in creation order.
func olderBucket(t *testing.T) (b *KV, ids, acked, pending []string) {
	t.Helper()
	b = openR1(t)
	ctx := context.Background()
	for i := range 30 {
		e, _, err := b.Insert(ctx, "p1", "c1", inboxtest.Report(fmt.Sprintf("turn-%d", i/3), fmt.Sprintf("call-%d", i%3), 0), "")
		must(t, err)
		ids = append(ids, e.InboxID)
		if i%3 == 2 {
			pending = append(pending, e.InboxID)
			continue
		}
		r, _, err := b.update(ctx, "p1", e.InboxID, func(r *record) bool {
			now := time.Now().UTC()
			r.State, r.AckedAt = inbox.StateAcked, &now
			return true
		})
		must(t, err)
		must(t, b.kv.Delete(ctx, pendingKey(r)))
		acked = append(acked, e.InboxID)
	}
	if n := pendingKeys(t, b); n != 30 {
		t.Fatalf("%d pending keys in the older bucket, want 30 (10 pending, 20 markers)", n)
	}
	return b, ids, acked, pending
}

func pendingKeys(t *testing.T, b *KV) int {
	t.Helper()
	ks, err := b.bk.Keys(context.Background(), "p.p1.agent-a.*")
	must(t, err)
	return len(ks)
}

// TestUpgradeListsAnOlderBucket: a bucket written by the version before
// the listing walk lists every entry, in creation order, page by page; a
// pending listing drops the markers it meets, once.
func TestUpgradeListsAnOlderBucket(t *testing.T) {
	b, ids, acked, pending := olderBucket(t)
	ctx := context.Background()
	pageAll := func(state inbox.State, limit int) []string {
		var out []string
		q := inbox.ListQuery{AgentID: "agent-a", State: state, Limit: limit}
		for {
			page, err := b.List(ctx, "p1", q)
			must(t, err)
			out = append(out, inboxtest.IDs(page)...)
			if len(page) < limit {
				return out
			}
			q.After = page[len(page)-1].InboxID
		}
	}
	tests := []struct {
		name  string
		state inbox.State
		limit int
		want  []string
	}{
		{"pending, one page", inbox.StatePending, inbox.MaxList, pending},
		{"pending, pages of 4", inbox.StatePending, 4, pending},
		{"every entry, pages of 4", inbox.StateAll, 4, ids},
		{"acked, pages of 7", inbox.StateAcked, 7, acked},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := pageAll(tc.state, tc.limit); !slices.Equal(got, tc.want) {
				t.Fatalf("listed %v, want %v", got, tc.want)
			}
		})
	}
	if n := pendingKeys(t, b); n != 10 {
		t.Fatalf("%d pending keys after a pending listing, want 10 (the markers dropped)", n)
	}
	if n, err := b.Pending(ctx); err != nil || n != 10 {
		t.Fatalf("Pending = %d, %v; want 10", n, err)
	}
}

// TestUpgradePendingCountsAnOlderBucket: Pending on a bucket written by
// the version before counts the pending entries only, and its first call
// drops every marker, so that later calls only count keys.
func TestUpgradePendingCountsAnOlderBucket(t *testing.T) {
	b, _, _, _ := olderBucket(t)
	for i := range 2 {
		if n, err := b.Pending(context.Background()); err != nil || n != 10 {
			t.Fatalf("Pending call %d = %d, %v; want 10", i+1, n, err)
		}
		if n := pendingKeys(t, b); n != 10 {
			t.Fatalf("%d pending keys after Pending call %d, want 10 (the markers dropped)", n, i+1)
		}
	}
}
