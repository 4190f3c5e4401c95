package tools

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// age moves the stored time of call id's record (turn-1, project demo)
// back by d, as if it had been stored that much earlier.
func age(t *testing.T, s *Service, id string, d time.Duration) {
	t.Helper()
	err := s.store.State().Update(context.Background(), func(tx state.Tx) error {
		b := tx.Bucket("demo", booking.BucketCalls)
		rec, err := toolkit.GetCall(b, "turn-1", id)
		if err != nil || rec == nil {
			t.Fatalf("no call record of %s (%v)", id, err)
		}
		rec.At = rec.At.Add(-d)
		return toolkit.PutCall(b, "turn-1", id, *rec)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// hasRecord reports whether call id has a call record.
func hasRecord(t *testing.T, s *Service, id string) bool {
	t.Helper()
	rec, err := s.store.Recorded(context.Background(), &booking.Record{Project: "demo", Turn: "turn-1", ToolCallID: id})
	if err != nil {
		t.Fatal(err)
	}
	return rec != nil
}

// Issue 28's "data must not grow forever" for ATP's call records, on the
// replicated state: a record older than toolkit.RecordMaxAge is deleted,
// by PurgeRecords and by the service's own schedule (purgeLoop), while a
// recent one still answers its call's retry with the recorded bytes and
// changes nothing.
func TestCallRecordsPurged(t *testing.T) {
	nc := meshtest.Conn(t, meshtest.NATS(t))
	s := openOn(t, nc, 1, func(st state.Store) state.Store { return st })
	ctx := context.Background()
	call := func(c *worker.Call) string {
		t.Helper()
		r, err := handler(t, s, c.ToolName)(ctx, c)
		if err != nil {
			t.Fatalf("%s %s: %v", c.ToolName, c.Command.ToolCallID, err)
		}
		return resultJSON(t, r)
	}
	var b struct {
		ID string `json:"booking_object_id"`
	}
	if err := json.Unmarshal([]byte(call(callOf(ToolBookingCreate, "create", map[string]any{"advance_to": "CONFIRMED", "booking": map[string]any{"title": "purge",
		"participants": []any{map[string]any{"participant_id": "p1", "name": "P"}}}}))), &b); err != nil || b.ID == "" {
		t.Fatalf("create: %v", err)
	}
	check := func(id string) *worker.Call {
		return callOf(ToolRecordSafetyCheck, id, map[string]any{"booking_object_id": b.ID, "check_type": "EQUIPMENT_FIT",
			"subject": "p1", "outcome": "PASS", "checked_by": "guide"})
	}
	first := map[string]string{}
	for _, id := range []string{"old", "recent", "old-2"} {
		first[id] = call(check(id))
	}
	age(t, s, "old", toolkit.RecordMaxAge+time.Hour)

	p, err := s.PurgeRecords(ctx)
	if err != nil || p.Deleted != 1 {
		t.Fatalf("PurgeRecords = %+v, %v; want the one old record deleted", p, err)
	}
	for id, want := range map[string]bool{"old": false, "recent": true, "old-2": true, "create": true} {
		if got := hasRecord(t, s, id); got != want {
			t.Errorf("call %s recorded after the purge: %v, want %v", id, got, want)
		}
	}
	events := func() uint64 {
		got, err := s.store.Get(ctx, "demo", b.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.EventCount
	}
	before := events()
	if again := call(check("recent")); again != first["recent"] {
		t.Fatalf("the recent call retried answered %s, want the recorded %s", again, first["recent"])
	}
	if n := events(); n != before {
		t.Fatalf("the recent call retried after the purge changed the booking: %d events, want %d", n, before)
	}

	// The service's own schedule.
	age(t, s, "old-2", toolkit.RecordMaxAge+time.Hour)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.purgeLoop(lctx, 10*time.Millisecond)
	for deadline := time.Now().Add(time.Minute); hasRecord(t, s, "old-2"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the purge loop left a record older than RecordMaxAge for a minute")
		}
	}
	if !hasRecord(t, s, "recent") {
		t.Fatal("the purge loop deleted a recent record")
	}
}
