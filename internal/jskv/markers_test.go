package jskv_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/jskv"
	"github.com/utpmesh/utpmesh/internal/meshtest"
)

// storedKeys lists the keys that have a message in the bucket's stream
// (a value or a marker).
func storedKeys(t *testing.T, js jetstream.JetStream, bucket string) []string {
	t.Helper()
	s, err := js.Stream(t.Context(), "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter("$KV."+bucket+".>"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for subj := range maps.Keys(info.State.Subjects) {
		out = append(out, subj[len("$KV."+bucket+"."):])
	}
	slices.Sort(out)
	return out
}

// TestPurgeMarkers: markers (of Delete and of Purge) written before the
// limit go, with nothing else; younger ones and every value stay.
func TestPurgeMarkers(t *testing.T) {
	ctx := context.Background()
	js, err := jetstream.New(meshtest.Conn(t, meshtest.NATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := jskv.Open(ctx, js, jskv.Config{Bucket: "m"})
	if err != nil {
		t.Fatal(err)
	}
	beforeDeletes := time.Now().Add(-time.Minute)
	for _, k := range []string{"live.1", "live.2", "gone.1", "gone.2", "purged.1", "back.1"} {
		if _, err := b.KV.Put(ctx, k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"gone.1", "gone.2", "back.1"} {
		if err := b.KV.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.KV.Purge(ctx, "purged.1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.KV.Put(ctx, "back.1", []byte("again")); err != nil { // deleted, then written again
		t.Fatal(err)
	}
	all := []string{"back.1", "gone.1", "gone.2", "live.1", "live.2", "purged.1"}
	if got := storedKeys(t, js, "m"); !slices.Equal(got, all) {
		t.Fatalf("stored keys = %v, want %v", got, all)
	}

	// Markers younger than the limit stay.
	if n, err := b.PurgeMarkers(ctx, beforeDeletes); err != nil || n != 0 {
		t.Fatalf("PurgeMarkers(before the deletes) = %d, %v; want 0", n, err)
	}
	if got := storedKeys(t, js, "m"); !slices.Equal(got, all) {
		t.Fatalf("stored keys after a purge of nothing = %v, want %v", got, all)
	}

	// Older ones go; values stay.
	if n, err := b.PurgeMarkers(ctx, time.Now().Add(time.Hour)); err != nil || n != 3 {
		t.Fatalf("PurgeMarkers = %d, %v; want 3 (2 deletes, 1 purge)", n, err)
	}
	if got, want := storedKeys(t, js, "m"), []string{"back.1", "live.1", "live.2"}; !slices.Equal(got, want) {
		t.Fatalf("stored keys after the purge = %v, want %v", got, want)
	}
	for k, want := range map[string]string{"live.1": "v", "live.2": "v", "back.1": "again"} {
		if e, err := b.KV.Get(ctx, k); err != nil || string(e.Value()) != want {
			t.Errorf("%s after the purge = %v, %v; want %q", k, e, err, want)
		}
	}
	if n, err := b.PurgeMarkers(ctx, time.Now().Add(time.Hour)); err != nil || n != 0 {
		t.Fatalf("second PurgeMarkers = %d, %v; want 0", n, err)
	}

	// A run whose context has ended purges nothing and says why.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.PurgeMarkers(done, time.Now().Add(time.Hour)); err == nil {
		t.Fatal("PurgeMarkers with an ended context succeeded")
	}
}
