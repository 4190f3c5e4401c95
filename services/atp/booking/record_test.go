package booking_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/state"
)

// TestCallRecords: the first write transaction of a call stores the
// call's record with its change, later ones of the same call do not; a
// transaction whose Result is nil (a refusal it logs) writes none; a
// second run of a recorded call is refused with ErrRecorded before it
// changes anything; CreateAdvanced stores the booking with its
// transitions in one transaction.
func TestCallRecords(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "atp.db"), newClock())
	ctx := context.Background()
	rec := func(id string, result func(state.Tx) (any, error)) *booking.Record {
		return &booking.Record{Project: "demo", Turn: "turn-1", ToolCallID: id, Tool: "t", ArgsHash: "h", Result: result}
	}
	value := func(v any) func(state.Tx) (any, error) { return func(state.Tx) (any, error) { return v, nil } }

	b, err := s.CreateAdvanced(ctx, "demo", sample(), "operator", "test", []booking.State{booking.PendingConfirmation, booking.Confirmed})
	if err != nil || b.State != booking.Confirmed || b.EventCount != 3 {
		t.Fatalf("CreateAdvanced = %+v, %v; want CONFIRMED with 3 events", b, err)
	}

	for _, tc := range []struct {
		name   string
		result func(state.Tx) (any, error)
		stored bool
	}{
		{"a change", value(map[string]string{"ok": "yes"}), true},
		{"a refusal it logs", value(nil), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rec(tc.name, tc.result)
			cctx := booking.WithRecord(ctx, r)
			if _, _, err := s.Transition(cctx, "demo", b.ID, booking.Suspended, "operator", tc.name); err != nil {
				t.Fatal(err)
			}
			// A second transaction of the same call is not its change.
			if _, _, err := s.Transition(cctx, "demo", b.ID, booking.Resume, "operator", tc.name); err != nil {
				t.Fatalf("a later transaction of the call: %v", err)
			}
			got, err := s.Recorded(ctx, r)
			if err != nil || (got != nil) != tc.stored {
				t.Fatalf("record = %+v, %v; stored %t", got, err, tc.stored)
			}
			if tc.stored && (string(got.Result) != `{"ok":"yes"}` || string(r.Written()) != `{"ok":"yes"}`) {
				t.Fatalf("record holds %s, written %s", got.Result, r.Written())
			}
			// The call again, as a redelivery would run it.
			before, _ := s.Get(ctx, "demo", b.ID)
			_, _, err = s.Transition(booking.WithRecord(ctx, rec(tc.name, tc.result)), "demo", b.ID, booking.Suspended, "operator", "again")
			after, _ := s.Get(ctx, "demo", b.ID)
			if tc.stored {
				if !errors.Is(err, booking.ErrRecorded) || after.EventCount != before.EventCount {
					t.Fatalf("a recorded call run again = %v, %d events (was %d); want ErrRecorded and no change", err, after.EventCount, before.EventCount)
				}
				return
			}
			if err != nil || after.EventCount != before.EventCount+1 {
				t.Fatalf("an unrecorded call run again = %v; want it to run", err)
			}
			if _, _, err := s.Transition(ctx, "demo", b.ID, booking.Resume, "operator", "back"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
