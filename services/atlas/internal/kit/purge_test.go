package kit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/internal/determ"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// Issue 28's "data must not grow forever" for ATLAS, on both states: a
// call record and a pending confirmation older than toolkit.RecordMaxAge
// are deleted, by PurgeRecords and by the service's own schedule
// (purgeLoop), while a recent record still answers its call's retry
// without running the call again.
func TestCallRecordsPurged(t *testing.T) {
	nc := meshtest.Conn(t, meshtest.NATS(t))
	for _, mode := range []string{atlas.StateBolt, atlas.StateJetStream} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			cards, err := boltstore.Open(filepath.Join(dir, "cards.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cards.Close() })
			s, err := New("tasks", atlas.Deps{NC: nc, Store: cards, DataDir: dir, State: mode, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			var runs atomic.Int32
			mk := func(x *Exec) (Outcome, error) {
				runs.Add(1)
				id := x.ID("obj", 0)
				if _, err := toolkit.PutNew(x.Bucket("objs"), id, map[string]string{"id": id}, x.ToolCallID); err != nil {
					return Outcome{}, err
				}
				return Outcome{Result: map[string]string{"id": id}}, nil
			}
			tools, err := s.Tools(Spec{Name: "MAKE", Params: `{"type":"object"}`, Run: mk},
				Spec{Name: "RISKY", Params: `{"type":"object"}`, Confirmation: registry.ConfirmAlways, Run: mk,
					Plan: func(*Exec) (any, error) { return map[string]string{"would": "make"}, nil }})
			if err != nil {
				t.Fatal(err)
			}
			calls := map[string]*worker.Call{} // a retry is the same call: the same tool.call card
			do := func(tool int, id string) string {
				t.Helper()
				c := calls[id]
				if c == nil {
					c = testCall(t, cards, "turn-1", id)
					calls[id] = c
				}
				r, err := tools[tool].Handler(ctx, c)
				if err != nil {
					t.Fatalf("%s %s: %v", tools[tool].Name, id, err)
				}
				return fmt.Sprint(r.Value)
			}
			first := do(0, "call-recent")
			do(0, "call-old")
			do(1, "call-park") // a call record and a pending confirmation
			// age moves call id's records back by RecordMaxAge and an hour.
			age := func(id string) {
				t.Helper()
				d := toolkit.RecordMaxAge + time.Hour
				if err := s.st.Update(ctx, func(tx state.Tx) error {
					b := tx.Bucket("demo", bucketCalls)
					rec, err := toolkit.GetCall(b, "turn-1", id)
					if err != nil || rec == nil {
						return fmt.Errorf("no call record of %s (%v)", id, err)
					}
					rec.At = rec.At.Add(-d)
					if err := toolkit.PutCall(b, "turn-1", id, *rec); err != nil {
						return err
					}
					var p Pending
					pb := tx.Bucket("demo", bucketPending)
					cid := ConfirmationID("tasks", "demo", "turn-1", id)
					if found, err := toolkit.GetJSON(pb, cid, &p); err != nil || !found {
						return err
					}
					at, err := time.Parse(time.RFC3339, p.Origin.Time)
					if err != nil {
						return err
					}
					p.Origin.Time = determ.Format(at.Add(-d))
					return toolkit.PutJSON(pb, cid, p)
				}); err != nil {
					t.Fatal(err)
				}
			}
			// stored reports whether call id has a call record and a
			// pending confirmation.
			stored := func(id string) (call, pending bool) {
				t.Helper()
				if err := s.st.View(ctx, func(tx state.Tx) error {
					rec, err := toolkit.GetCall(tx.Bucket("demo", bucketCalls), "turn-1", id)
					call = rec != nil
					if err != nil {
						return err
					}
					_, pending, err = tx.Bucket("demo", bucketPending).Get(ConfirmationID("tasks", "demo", "turn-1", id))
					return err
				}); err != nil {
					t.Fatal(err)
				}
				return call, pending
			}
			age("call-old")
			age("call-park")

			p, err := s.PurgeRecords(ctx)
			if err != nil || p.Deleted != 3 {
				t.Fatalf("PurgeRecords = %+v, %v; want 3 deleted (2 call records, 1 pending confirmation)", p, err)
			}
			for _, tc := range []struct {
				id            string
				call, pending bool
			}{{"call-old", false, false}, {"call-park", false, false}, {"call-recent", true, false}} {
				if call, pending := stored(tc.id); call != tc.call || pending != tc.pending {
					t.Errorf("%s after the purge: call record %v, pending %v; want %v, %v", tc.id, call, pending, tc.call, tc.pending)
				}
			}
			before := runs.Load()
			if again := do(0, "call-recent"); again != first {
				t.Fatalf("the recent call retried answered %s, want the recorded %s", again, first)
			}
			if runs.Load() != before {
				t.Fatal("the recent call retried after the purge ran again")
			}

			// The service's own schedule.
			age("call-recent")
			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go s.purgeLoop(lctx, 10*time.Millisecond)
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
				if call, _ := stored("call-recent"); !call {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the purge loop left a record older than RecordMaxAge for a minute")
				}
			}
		})
	}
}

// BenchmarkPurge measures one purge of a project's call records on the
// replicated state (R1): "keep" when none is old (the hourly cost of a
// steady state), "delete" when all are. b.N purges; each reads every
// record.
func BenchmarkPurge(b *testing.B) {
	const records = 2000
	nc := meshtest.Conn(b, meshtest.NATS(b))
	for _, tc := range []struct {
		name string
		age  time.Duration
	}{{"keep", 0}, {"delete", toolkit.RecordMaxAge + time.Hour}} {
		b.Run(fmt.Sprintf("%s/records=%d", tc.name, records), func(b *testing.B) {
			ctx := context.Background()
			cards, err := boltstore.Open(filepath.Join(b.TempDir(), "cards.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = cards.Close() }()
			s, err := New("bench"+tc.name, atlas.Deps{NC: nc, Store: cards, State: atlas.StateJetStream, PurgeEvery: -1,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			fill := func() {
				at := time.Now().Add(-tc.age)
				for i := 0; i < records; i += 50 {
					if err := s.st.Update(ctx, func(tx state.Tx) error {
						for j := i; j < i+50; j++ {
							if err := toolkit.PutCall(tx.Bucket("demo", bucketCalls), "turn", fmt.Sprint("call-", j),
								toolkit.CallRecord{ToolName: "MAKE", ArgsHash: "h", Result: []byte(`{"id":"x"}`), At: at}); err != nil {
								return err
							}
						}
						return nil
					}); err != nil {
						b.Fatal(err)
					}
				}
			}
			for b.Loop() {
				b.StopTimer()
				fill()
				b.StartTimer()
				p, err := s.PurgeRecords(ctx)
				if err != nil || (tc.age > 0) != (p.Deleted == records) {
					b.Fatalf("purge = %+v, %v", p, err)
				}
			}
		})
	}
}
