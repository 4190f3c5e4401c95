package jskv_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/jskv"
	"github.com/utpmesh/utpmesh/internal/meshtest"
)

// TestNext: a walk of a key pattern from a stream sequence finds its keys
// in write order, a delete marker as Exists false, other keys passed
// over, and ends with found false.
func TestNext(t *testing.T) {
	ctx := context.Background()
	js, err := jetstream.New(meshtest.Conn(t, meshtest.NATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := jskv.Open(ctx, js, jskv.Config{Bucket: "n"})
	if err != nil {
		t.Fatal(err)
	}
	revs := map[string]uint64{}
	for _, k := range []string{"a.2", "b.1", "a.1", "a-x.1", "a.3"} {
		rev, err := b.KV.Put(ctx, k, []byte(k))
		if err != nil {
			t.Fatal(err)
		}
		revs[k] = rev
	}
	if err := b.KV.Delete(ctx, "a.3"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		filter string
		from   uint64
		want   string // key, "" for none
		exists bool
	}{
		{"from the start", "a.*", 0, "a.2", true},
		{"from the first key's sequence", "a.*", revs["a.2"], "a.2", true},
		{"after it: the next one written", "a.*", revs["a.2"] + 1, "a.1", true},
		{"a delete marker", "a.*", revs["a.1"] + 1, "a.3", false},
		{"past the last", "a.*", revs["a.3"] + 2, "", false},
		{"one key", "b.1", 0, "b.1", true},
		{"no such key", "c.*", 0, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key, e, found, err := b.Next(ctx, tc.filter, tc.from)
			if err != nil {
				t.Fatal(err)
			}
			if found != (tc.want != "") || key != tc.want || e.Exists != tc.exists {
				t.Fatalf("Next(%s, %d) = %q exists %v found %v; want %q exists %v", tc.filter, tc.from, key, e.Exists, found, tc.want, tc.exists)
			}
			if found && e.Exists && string(e.Value) != key {
				t.Fatalf("Next(%s, %d) value = %q, want %q", tc.filter, tc.from, e.Value, key)
			}
		})
	}
}
