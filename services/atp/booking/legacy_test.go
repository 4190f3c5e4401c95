package booking_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/boltstate"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
)

// testdata/atp-v1.db was written by the ATP service before the state
// engine (commit 37f606e: booking.Open, Create, Transition, hem's Invoke,
// and its notification and activity buckets): a booking in CONFIRMED with
// three events, a booking of another project, a HEM task, a notification
// record and an activity.
const (
	v1Booking = "0190f3a2-0000-7000-8000-000000000001"
	v1Other   = "0190f3a2-0000-7000-8000-000000000002"
)

func copyFixture(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "atp-v1.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "atp.db")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The file is imported once into either backend; its records read as they
// did, the log goes on from where it was, and a second import (the file
// copied back) adds nothing.
func TestImportLegacy(t *testing.T) {
	srv := meshtest.NATS(t)
	var n atomic.Int64
	for _, tc := range []struct {
		name string
		open func(t *testing.T) state.Store
	}{
		{"bolt", func(t *testing.T) state.Store {
			s, err := boltstate.Open(filepath.Join(t.TempDir(), "atp-state.db"), 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}},
		{"jetstream", func(t *testing.T) state.Store {
			s, err := kvstate.Open(context.Background(), meshtest.Conn(t, srv), kvstate.Config{Bucket: fmt.Sprintf("atp_import%d", n.Add(1))})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := tc.open(t)
			path := copyFixture(t)
			got, err := booking.ImportLegacy(ctx, path, st)
			if err != nil {
				t.Fatal(err)
			}
			// The HEM task's invocation added no event (it has no booking).
			if want := (booking.Imported{Bookings: 2, Events: 4, HEMTasks: 1, Notifications: 1, Activities: 1}); got != want {
				t.Fatalf("imported %+v, want %+v", got, want)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Fatalf("atp.db still there after the import: %v", err)
			}
			if _, err := os.Stat(path + booking.ImportedSuffix); err != nil {
				t.Fatalf("atp.db was not renamed: %v", err)
			}
			s := booking.New(st, booking.Options{})
			b, err := s.Get(ctx, "demo", v1Booking)
			if err != nil {
				t.Fatal(err)
			}
			if b.State != booking.Confirmed || b.EventCount != 3 || b.Title != "Niseko ski week (v1 file)" {
				t.Fatalf("imported booking = %+v", b)
			}
			evs, err := s.Events(ctx, "demo", v1Booking, 0, 0, true)
			if err != nil || len(evs) != 3 || evs[0].Type != booking.EventCreated || evs[2].ID != v1Booking+"/3" {
				t.Fatalf("imported log = %+v, %v", evs, err)
			}
			if _, err := s.Get(ctx, "other", v1Other); err != nil {
				t.Fatalf("the other project's booking: %v", err)
			}
			for _, rec := range []struct{ bucket, key string }{{booking.BucketHEMTasks, "hem_v1fixture"}, {booking.BucketNotifications, "ntf_v1"}, {booking.BucketActivities, "act-v1"}} {
				if err := st.View(ctx, func(tx state.Tx) error {
					_, found, err := tx.Bucket("demo", rec.bucket).Get(rec.key)
					if err == nil && !found {
						err = fmt.Errorf("%s/%s missing", rec.bucket, rec.key)
					}
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			// The log goes on after the imported events.
			evsAdded, err := s.Update(ctx, "demo", v1Booking, func(tx *booking.Tx) error {
				_, err := tx.Append(booking.EventSafetyCheck, "test", nil)
				return err
			})
			if err != nil || len(evsAdded) != 1 || evsAdded[0].ID != v1Booking+"/4" {
				t.Fatalf("append after import = %+v, %v", evsAdded, err)
			}
			// Imported again (the file put back): nothing changes.
			again, err := booking.ImportLegacy(ctx, copyFixtureTo(t, path), st)
			if err != nil {
				t.Fatal(err)
			}
			if want := (booking.Imported{Skipped: 5}); again != want {
				t.Fatalf("second import %+v, want %+v", again, want)
			}
			if b, _ := s.Get(ctx, "demo", v1Booking); b.EventCount != 4 {
				t.Fatalf("the second import changed the booking: %+v", b)
			}
			// No file: nothing to do.
			if none, err := booking.ImportLegacy(ctx, filepath.Join(t.TempDir(), "atp.db"), st); err != nil || none != (booking.Imported{}) {
				t.Fatalf("import of no file = %+v, %v", none, err)
			}
		})
	}
}

func copyFixtureTo(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "atp-v1.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
