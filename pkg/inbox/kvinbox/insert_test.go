package kvinbox

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/jskv"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/inboxtest"
)

// keysOf returns the revisions of a new entry's keys: dedupe key,
// indexes and entry, in the order the batch writes them.
func keysOf(t *testing.T, b *KV, r *record) []uint64 {
	t.Helper()
	rep := inboxtest.Report(r.AgentTurnID, r.ToolCallID, r.TurnEpoch)
	var revs []uint64
	for _, k := range []string{callKey(r.ProjectID, rep), agentKey(r), turnKey(r), pendingKey(r), entryKey(r.ProjectID, r.InboxID)} {
		e, err := b.bk.Latest(context.Background(), k)
		must(t, err)
		revs = append(revs, e.Revision)
	}
	return revs
}

// TestInsertIsOneBatch: a new entry's dedupe key, indexes and entry are
// one atomic batch (consecutive revisions, the entry last), so no crash
// leaves the dedupe key without its entry.
func TestInsertIsOneBatch(t *testing.T) {
	b := openR1(t)
	if !b.bk.Atomic() {
		t.Fatal("the inbox bucket takes no atomic batches")
	}
	e, created, err := b.Insert(context.Background(), "p1", "c1", inboxtest.Report("turn-1", "call-1", 0), "")
	must(t, err)
	if !created || e.State != inbox.StatePending {
		t.Fatalf("insert = %+v, created %v", e, created)
	}
	revs := keysOf(t, b, &record{Entry: *e})
	for i := 1; i < len(revs); i++ {
		if revs[i] != revs[0]+uint64(i) {
			t.Fatalf("revisions of dedupe key, indexes and entry = %v; want consecutive (one batch)", revs)
		}
	}
}

// TestInsertWithoutBatches: when the bucket's stream stops taking atomic
// batches (an older server, a node's Open resetting the setting), Insert
// writes key by key, and a report's duplicate still finds its entry.
func TestInsertWithoutBatches(t *testing.T) {
	srv := meshtest.NATS(t)
	js, err := jetstream.New(meshtest.Conn(t, srv))
	must(t, err)
	b := openOn(t, js, 1)
	ctx := context.Background()
	st, err := js.Stream(ctx, "KV_"+b.kv.Bucket())
	must(t, err)
	cfg := st.CachedInfo().Config
	cfg.AllowAtomicPublish = false
	_, err = js.UpdateStream(ctx, cfg)
	must(t, err)
	rep := inboxtest.Report("turn-1", "call-1", 0)
	e, created, err := b.Insert(ctx, "p1", "c1", rep, "")
	must(t, err)
	again, dup, err := b.Insert(ctx, "p1", "c1", rep, "")
	must(t, err)
	if !created || dup || again.InboxID != e.InboxID {
		t.Fatalf("insert, again = %s (created %v), %s (created %v); want one entry, then its duplicate", e.InboxID, created, again.InboxID, dup)
	}
}

// TestDuplicateOfAnEntryBehindItsTurn: an insert whose batch was stored
// but whose process stopped before its second look at the turn's epoch
// (or lost the batch's acknowledgement) left a pending entry below an
// epoch a set_epoch raised meanwhile; the report's redelivery turns it
// stale, as the insert would have.
func TestDuplicateOfAnEntryBehindItsTurn(t *testing.T) {
	b := openR1(t)
	ctx := context.Background()
	rep := inboxtest.Report("turn-1", "call-1", 1)
	r := newRecord(card.NewID(), "p1", "c1", rep, "", false)
	v, err := json.Marshal(r)
	must(t, err)
	pairs := []jskv.Pair{{Key: callKey("p1", rep), Value: []byte(r.InboxID)}}
	for _, k := range indexKeys(r) {
		pairs = append(pairs, jskv.Pair{Key: k})
	}
	_, err = b.bk.CreateAll(ctx, append(pairs, jskv.Pair{Key: entryKey("p1", r.InboxID), Value: v}))
	must(t, err)
	// The epoch a set_epoch raised before it found the entry.
	_, err = b.kv.Create(ctx, "t.p1."+hashToken("p1", rep.AgentTurnID), []byte("2"))
	must(t, err)
	e, created, err := b.Insert(ctx, "p1", "c1", rep, "")
	must(t, err)
	if created || e.InboxID != r.InboxID || e.State != inbox.StateStale {
		t.Fatalf("redelivered report = %s %s (created %v); want entry %s, stale", e.InboxID, e.State, created, r.InboxID)
	}
	if n := pendingKeys(t, b); n != 0 {
		t.Fatalf("%d pending keys, want 0", n)
	}
}
