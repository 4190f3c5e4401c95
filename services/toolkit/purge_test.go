package toolkit_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/boltstate"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// A call record outlives every delivery of its call's command and a
// pending confirmation's life.
func TestRecordMaxAgeOutlivesRetries(t *testing.T) {
	if toolkit.RecordMaxAge <= streams.CommandMaxAge || toolkit.RecordMaxAge <= toolkit.PendingTTL {
		t.Fatalf("RecordMaxAge %v must exceed the command stream's max age %v and PendingTTL %v", toolkit.RecordMaxAge, streams.CommandMaxAge, toolkit.PendingTTL)
	}
}

// Purge deletes the records older than the max age in every project,
// keeps the recent ones, stamps the ones an earlier version wrote without
// a time (kept until one max age later) and keeps an unreadable one,
// naming it.
func TestPurge(t *testing.T) {
	ctx := context.Background()
	st, err := boltstate.Open(filepath.Join(t.TempDir(), "state.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	rec := func(at time.Time) toolkit.CallRecord {
		return toolkit.CallRecord{ToolName: "MAKE", ArgsHash: "h", Result: json.RawMessage(`{"id":"x"}`), At: at}
	}
	type key struct{ project, call string }
	records := []struct {
		key
		write func(b state.Bucket) error
		kept  bool
	}{
		{key{"p1", "old"}, func(b state.Bucket) error {
			return toolkit.PutCall(b, "turn", "old", rec(now.Add(-toolkit.RecordMaxAge-time.Minute)))
		}, false},
		{key{"p2", "old"}, func(b state.Bucket) error { return toolkit.PutCall(b, "turn", "old", rec(now.Add(-30*24*time.Hour))) }, false},
		{key{"p1", "recent"}, func(b state.Bucket) error {
			return toolkit.PutCall(b, "turn", "recent", rec(now.Add(-toolkit.RecordMaxAge+time.Minute)))
		}, true},
		{key{"p2", "legacy"}, func(b state.Bucket) error {
			return b.Put(toolkit.CallKey("turn", "legacy"), []byte(`{"tool_name":"MAKE","args_hash":"h","result":{"id":"y"},"receipt":null}`))
		}, true},
		{key{"p2", "garbled"}, func(b state.Bucket) error { return b.Put(toolkit.CallKey("turn", "garbled"), []byte(`{`)) }, true},
	}
	if err := st.Update(ctx, func(tx state.Tx) error {
		for _, r := range records {
			if err := r.write(tx.Bucket(r.project, "_calls")); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got, err := toolkit.Purge(ctx, st, now, toolkit.RecordMaxAge, toolkit.CallRecords("_calls"))
	if !errors.Is(err, toolkit.ErrRecord) {
		t.Errorf("Purge error = %v, want the garbled record named (ErrRecord)", err)
	}
	if want := (toolkit.Purged{Deleted: 2, Stamped: 1, Unreadable: 1}); got != want {
		t.Errorf("Purge = %+v, want %+v", got, want)
	}
	if err := st.View(ctx, func(tx state.Tx) error {
		for _, r := range records {
			_, found, err := tx.Bucket(r.project, "_calls").Get(toolkit.CallKey("turn", r.call))
			if err != nil {
				return err
			}
			if found != r.kept {
				t.Errorf("%s/%s: stored %v after the purge, want %v", r.project, r.call, found, r.kept)
			}
		}
		legacy, err := toolkit.GetCall(tx.Bucket("p2", "_calls"), "turn", "legacy")
		if err != nil || legacy == nil || !legacy.At.Equal(now) || string(legacy.Result) != `{"id":"y"}` {
			t.Errorf("the legacy record after the purge: %+v, %v; want its result stamped with the purge's time", legacy, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The stamped record goes one max age after the purge that stamped it.
	later, _ := toolkit.Purge(ctx, st, now.Add(toolkit.RecordMaxAge+time.Minute), toolkit.RecordMaxAge, toolkit.CallRecords("_calls"))
	if later.Deleted != 2 { // the recent one and the stamped one
		t.Errorf("a max age later: %+v, want 2 deleted", later)
	}
}
