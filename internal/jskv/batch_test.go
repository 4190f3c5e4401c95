package jskv_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/jskv"
	"github.com/utpmesh/utpmesh/internal/jskv/jskvtest"
	"github.com/utpmesh/utpmesh/internal/meshtest"
)

// openAtomic opens bucket "b" on js with atomic batches on.
func openAtomic(t *testing.T, js jetstream.JetStream, replicas int) *jskv.Bucket {
	t.Helper()
	b, err := jskv.Open(context.Background(), js, jskv.Config{Bucket: "b", Replicas: replicas, Atomic: true})
	if err != nil {
		t.Fatal(err)
	}
	if !b.Atomic() {
		t.Fatal("Atomic() = false on a server that takes atomic batches")
	}
	return b
}

func jsOn(t *testing.T) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(meshtest.Conn(t, meshtest.NATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestCreateAll: the keys of a batch are stored all together, the last
// one at the revision CreateAll returns, and not at all when one of them
// exists (a value or a delete marker).
func TestCreateAll(t *testing.T) {
	testCreateAll(t, openAtomic(t, jsOn(t), 1))
}

// TestCreateAllR3 is TestCreateAll on a bucket replicated on three
// servers.
func TestCreateAllR3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := jskvtest.Start(t)
	testCreateAll(t, openAtomic(t, c.JetStream(t, 0), 3))
}

func testCreateAll(t *testing.T, b *jskv.Bucket) {
	ctx := context.Background()
	rev, err := b.CreateAll(ctx, []jskv.Pair{{Key: "k.1", Value: []byte("one")}, {Key: "k.2"}, {Key: "k.3", Value: []byte("three")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k.1", "k.2", "k.3"} {
		if e, err := b.Latest(ctx, k); err != nil || !e.Exists {
			t.Fatalf("%s after the batch = %+v, %v; want it stored", k, e, err)
		}
	}
	if e, _ := b.Latest(ctx, "k.3"); e.Revision != rev || string(e.Value) != "three" {
		t.Fatalf("last key = %+v; want three at revision %d", e, rev)
	}
	if _, err := b.KV.Put(ctx, "gone", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := b.KV.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	for _, clash := range []string{"k.2", "gone"} {
		_, err := b.CreateAll(ctx, []jskv.Pair{{Key: "n.1", Value: []byte("x")}, {Key: clash, Value: []byte("x")}, {Key: "n.2"}})
		if !jskv.Conflict(err) {
			t.Fatalf("batch with existing key %s = %v, want a conflict", clash, err)
		}
		for _, k := range []string{"n.1", "n.2"} {
			if e, err := b.Latest(ctx, k); err != nil || e.Revision != 0 {
				t.Fatalf("%s after a refused batch = %+v, %v; want nothing stored", k, e, err)
			}
		}
	}
}

// TestCreateAllRace: of batches that create the same key at once, one
// stores its keys and every other stores nothing.
func TestCreateAllRace(t *testing.T) {
	b := openAtomic(t, jsOn(t), 1)
	ctx := context.Background()
	const racers = 8
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			_, errs[i] = b.CreateAll(ctx, []jskv.Pair{{Key: "same"}, {Key: "own." + string(rune('a'+i))}})
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		own, rerr := b.Latest(ctx, "own."+string(rune('a'+i)))
		if rerr != nil {
			t.Fatal(rerr)
		}
		switch {
		case err == nil && own.Exists:
			won++
		case jskv.Conflict(err) && own.Revision == 0:
		default:
			t.Fatalf("racer %d: %v, its own key %+v", i, err, own)
		}
	}
	if won != 1 {
		t.Fatalf("%d batches stored, want 1", won)
	}
}

// TestCreateAllNeedsAtomic: a bucket opened without Config.Atomic takes
// no batch; opening it again with Atomic turns them on, and opening it
// once more keeps them on.
func TestCreateAllNeedsAtomic(t *testing.T) {
	ctx := context.Background()
	js := jsOn(t)
	plain, err := jskv.Open(ctx, js, jskv.Config{Bucket: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.CreateAll(ctx, []jskv.Pair{{Key: "k"}}); !errors.Is(err, jskv.ErrNoBatch) || plain.Atomic() {
		t.Fatalf("CreateAll without Atomic = %v (Atomic() %v), want ErrNoBatch", err, plain.Atomic())
	}
	for range 2 {
		b := openAtomic(t, js, 1)
		st, err := js.Stream(ctx, "KV_b")
		if err != nil {
			t.Fatal(err)
		}
		if !st.CachedInfo().Config.AllowAtomicPublish {
			t.Fatal("stream KV_b does not allow atomic batches after Open with Atomic")
		}
		if _, err := b.CreateAll(ctx, []jskv.Pair{{Key: "k"}}); err != nil && !jskv.Conflict(err) {
			t.Fatal(err)
		}
	}
}
