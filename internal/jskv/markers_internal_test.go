package jskv

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/meshtest"
)

// TestPurgeUpToKeepsALaterWrite: the purge of a marker a listing showed
// keeps a value written on the key after it (the race of a purge with a
// worker writing the key again).
func TestPurgeUpToKeepsALaterWrite(t *testing.T) {
	ctx := context.Background()
	js, err := jetstream.New(meshtest.Conn(t, meshtest.NATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(ctx, js, Config{Bucket: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.KV.Put(ctx, "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := b.KV.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	marker, err := b.Latest(ctx, "k")
	if err != nil || marker.Exists {
		t.Fatalf("after delete = %+v, %v", marker, err)
	}
	if _, err := b.KV.Put(ctx, "k", []byte("v2")); err != nil { // after the listing
		t.Fatal(err)
	}
	if err := b.purge(ctx, "k", marker.Revision+1); err != nil {
		t.Fatal(err)
	}
	if e, err := b.Latest(ctx, "k"); err != nil || string(e.Value) != "v2" {
		t.Fatalf("after the marker's purge = %+v, %v; want v2", e, err)
	}
}
