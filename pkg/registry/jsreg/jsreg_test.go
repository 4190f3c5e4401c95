package jsreg_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/registry/jsreg"
	"github.com/utpmesh/utpmesh/pkg/registry/registrytest"
)

// bucketSeq names a fresh bucket per store under test on a shared server.
var bucketSeq atomic.Int64

func freshBucket() string { return fmt.Sprintf("reg_%d", bucketSeq.Add(1)) }

// open opens a store on bucket over a new connection to srv (a "node").
func open(t testing.TB, srv *embednats.Server, cfg jsreg.Config) *jsreg.Store {
	t.Helper()
	js, err := jetstream.New(meshtest.Conn(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	s, err := jsreg.Open(context.Background(), js, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	srv := meshtest.NATS(t)
	registrytest.Run(t, func(t *testing.T) registry.Registry {
		return open(t, srv, jsreg.Config{Bucket: freshBucket()})
	})
}

// TestTwoNodes: two stores on one bucket (two processes of a cluster) see
// each other's writes.
func TestTwoNodes(t *testing.T) {
	ctx := context.Background()
	srv := meshtest.NATS(t)
	b := freshBucket()
	a, other := open(t, srv, jsreg.Config{Bucket: b}), open(t, srv, jsreg.Config{Bucket: b})
	put, err := a.Put(ctx, registrytest.NewEntry("demo", "artifact.put"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := other.Get(ctx, "demo", "artifact.put")
	if err != nil || !registrytest.Equal(got, put) {
		t.Fatalf("other node Get = %+v, %v; want %+v", got, err, put)
	}
	if list, err := other.List(ctx, "demo"); err != nil || len(list) != 1 {
		t.Fatalf("other node List = %v, %v", list, err)
	}
	if err := other.Delete(ctx, "demo", "artifact.put"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(ctx, "demo", "artifact.put"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("Get after the other node's Delete = %v, want ErrNotFound", err)
	}
	// Put again after a delete (the key's last revision is a delete marker).
	if _, err := a.Put(ctx, registrytest.NewEntry("demo", "artifact.put")); err != nil {
		t.Fatalf("Put after Delete: %v", err)
	}
	if _, err := other.Get(ctx, "demo", "artifact.put"); err != nil {
		t.Fatalf("Get after re-Put: %v", err)
	}
}

// TestConcurrentDelete: of many concurrent Deletes of one entry from two
// nodes, exactly one succeeds; the rest get ErrNotFound.
func TestConcurrentDelete(t *testing.T) {
	ctx := context.Background()
	srv := meshtest.NATS(t)
	b := freshBucket()
	nodes := []*jsreg.Store{open(t, srv, jsreg.Config{Bucket: b}), open(t, srv, jsreg.Config{Bucket: b})}
	for round := range 5 {
		if _, err := nodes[0].Put(ctx, registrytest.NewEntry("demo", "echo")); err != nil {
			t.Fatal(err)
		}
		const n = 8
		var wg sync.WaitGroup
		var ok, notFound atomic.Int32
		for i := range n {
			wg.Go(func() {
				err := nodes[i%2].Delete(ctx, "demo", "echo")
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, registry.ErrNotFound):
					notFound.Add(1)
				default:
					t.Errorf("Delete: %v", err)
				}
			})
		}
		wg.Wait()
		if ok.Load() != 1 || notFound.Load() != n-1 {
			t.Fatalf("round %d: %d deletes succeeded and %d got ErrNotFound; want 1 and %d", round, ok.Load(), notFound.Load(), n-1)
		}
	}
}

// TestConcurrentPuts: puts of different entries from two nodes all land.
func TestConcurrentPuts(t *testing.T) {
	ctx := context.Background()
	srv := meshtest.NATS(t)
	b := freshBucket()
	nodes := []*jsreg.Store{open(t, srv, jsreg.Config{Bucket: b}), open(t, srv, jsreg.Config{Bucket: b})}
	const n = 16
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			e := registrytest.NewEntry("demo", "echo")
			e.Description = fmt.Sprintf("writer %d", i)
			if _, err := nodes[i%2].Put(ctx, e); err != nil {
				t.Errorf("Put same key: %v", err)
			}
			if _, err := nodes[i%2].Put(ctx, registrytest.NewEntry("demo", fmt.Sprintf("t%02d", i))); err != nil {
				t.Errorf("Put: %v", err)
			}
		})
	}
	wg.Wait()
	list, err := nodes[1].List(ctx, "demo")
	if err != nil || len(list) != n+1 {
		t.Fatalf("List = %d entries, %v; want %d", len(list), err, n+1)
	}
	if !strings.HasPrefix(list[0].Description, "writer ") {
		t.Fatalf("echo = %q, want one writer's description", list[0].Description)
	}
}

// TestUpdatedAtNeverGoesBack: a node whose clock is an hour behind does
// not move an entry's updated_at back.
func TestUpdatedAtNeverGoesBack(t *testing.T) {
	ctx := context.Background()
	srv := meshtest.NATS(t)
	b := freshBucket()
	now := time.Date(2026, 11, 23, 7, 0, 0, 0, time.UTC)
	ahead := open(t, srv, jsreg.Config{Bucket: b, Clock: func() time.Time { return now }})
	behind := open(t, srv, jsreg.Config{Bucket: b, Clock: func() time.Time { return now.Add(-time.Hour) }})
	first, err := ahead.Put(ctx, registrytest.NewEntry("demo", "echo"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := behind.Put(ctx, registrytest.NewEntry("demo", "echo"))
	if err != nil {
		t.Fatal(err)
	}
	if !second.UpdatedAt.Equal(first.UpdatedAt) {
		t.Fatalf("updated_at %v after %v: the slow clock moved it", second.UpdatedAt, first.UpdatedAt)
	}
	// A new key takes the node's own clock.
	other, err := behind.Put(ctx, registrytest.NewEntry("demo", "other"))
	if err != nil || !other.UpdatedAt.Equal(now.Add(-time.Hour)) {
		t.Fatalf("new key updated_at = %v, %v", other.UpdatedAt, err)
	}
}

// TestToolNamesWithDots: names that differ only in dots are distinct keys.
func TestToolNamesWithDots(t *testing.T) {
	ctx := context.Background()
	s := open(t, meshtest.NATS(t), jsreg.Config{Bucket: freshBucket()})
	names := []string{".", "..", "a.", ".a", "a..b", "a.b", "a-b", "a_b"}
	for _, n := range names {
		e := registrytest.NewEntry("demo", n)
		e.Description = "tool " + n
		if _, err := s.Put(ctx, e); err != nil {
			t.Fatalf("Put %q: %v", n, err)
		}
	}
	for _, n := range names {
		if e, err := s.Get(ctx, "demo", n); err != nil || e.ToolName != n || e.Description != "tool "+n {
			t.Fatalf("Get %q = %+v, %v", n, e, err)
		}
	}
	if list, err := s.List(ctx, "demo"); err != nil || len(list) != len(names) {
		t.Fatalf("List = %d, %v; want %d", len(list), err, len(names))
	}
}

// TestReplicas: the bucket gets the configured replica count, and a count
// a single server cannot place is refused with what to do.
func TestReplicas(t *testing.T) {
	ctx := context.Background()
	srv := meshtest.NATS(t)
	b := freshBucket()
	open(t, srv, jsreg.Config{Bucket: b, Replicas: 1})
	js, err := jetstream.New(meshtest.Conn(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "KV_"+b)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; cfg.Replicas != 1 || cfg.MaxMsgsPerSubject != 1 || cfg.Storage != jetstream.FileStorage {
		t.Fatalf("bucket config: replicas %d, history %d, storage %v", cfg.Replicas, cfg.MaxMsgsPerSubject, cfg.Storage)
	}
	_, err = jsreg.Open(ctx, js, jsreg.Config{Bucket: freshBucket(), Replicas: 3})
	if err == nil || !strings.Contains(err.Error(), "set replicas to 1") {
		t.Fatalf("R3 on a single server: err = %v, want one saying to set replicas to 1", err)
	}
	if _, err = jsreg.Open(ctx, js, jsreg.Config{Bucket: freshBucket(), Replicas: 9}); err == nil || !strings.Contains(err.Error(), "use 1 (single server) or 3 (cluster)") {
		t.Fatalf("9 replicas: err = %v", err)
	}
}

// TestClosed: a closed store, or one whose connection is closed, fails
// every call with ErrClosed.
func TestClosed(t *testing.T) {
	ctx := context.Background()
	srv := meshtest.NATS(t)
	s := open(t, srv, jsreg.Config{Bucket: freshBucket()})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "demo", "echo"); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Get after Close = %v", err)
	}
	nc := meshtest.Conn(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := jsreg.Open(ctx, js, jsreg.Config{Bucket: freshBucket()})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if _, err := s2.Put(ctx, registrytest.NewEntry("demo", "echo")); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Put on a closed connection = %v", err)
	}
	if _, err := s2.Get(ctx, "demo", "echo"); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Get on a closed connection = %v", err)
	}
	if _, err := s2.List(ctx, "demo"); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("List on a closed connection = %v", err)
	}
}
