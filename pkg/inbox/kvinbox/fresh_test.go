package kvinbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/inboxtest"
)

// markNow runs MarkSentLater and waits for it.
func markNow(t *testing.T, b *KV, id string) bool {
	t.Helper()
	type res struct {
		first bool
		err   error
	}
	ch := make(chan res, 1)
	b.MarkSentLater("p1", id, time.Now(), func(first bool, err error) { ch <- res{first, err} })
	got := <-ch
	must(t, got.err)
	return got.first
}

// TestMarkOfANewEntry: the wakeup mark of an entry this KV inserted is
// written (once) without reading the entry; one acknowledged in between
// keeps its ack and gets its mark.
func TestMarkOfANewEntry(t *testing.T) {
	b := openR1(t)
	ctx := context.Background()
	e, _, err := b.Insert(ctx, "p1", "c1", inboxtest.Report("turn-1", "call-1", 0), "")
	must(t, err)
	if !markNow(t, b, e.InboxID) || markNow(t, b, e.InboxID) {
		t.Fatal("marks = not first, or first twice; want the first only")
	}
	got, err := b.Get(ctx, "p1", e.InboxID)
	must(t, err)
	if got.WakeupSentAt == nil || got.State != inbox.StatePending {
		t.Fatalf("marked entry = %+v", got)
	}

	acked, _, err := b.Insert(ctx, "p1", "c1", inboxtest.Report("turn-1", "call-2", 0), "")
	must(t, err)
	if n, err := b.Ack(ctx, "p1", []string{acked.InboxID}, time.Now()); err != nil || n != 1 {
		t.Fatalf("ack = %d, %v", n, err)
	}
	if !markNow(t, b, acked.InboxID) {
		t.Fatal("mark of an acked entry not written")
	}
	got, err = b.Get(ctx, "p1", acked.InboxID)
	must(t, err)
	if got.WakeupSentAt == nil || got.State != inbox.StateAcked || got.AckedAt == nil {
		t.Fatalf("entry acked, then marked = %+v; want both", got)
	}
}

// TestAckOneUnknownID: an ack of one id that is no entry fails with
// inbox.ErrNotFound naming it, and changes nothing.
func TestAckOneUnknownID(t *testing.T) {
	b := openR1(t)
	id := card.NewID()
	n, err := b.Ack(context.Background(), "p1", []string{id}, time.Now())
	if n != 0 || !errors.Is(err, inbox.ErrNotFound) {
		t.Fatalf("ack of unknown id = %d, %v; want inbox.ErrNotFound", n, err)
	}
	if !strings.Contains(err.Error(), id) {
		t.Fatalf("error %v does not name %s", err, id)
	}
}
