package kvstate_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/boltstate"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
)

// BenchmarkUpdate is one write transaction (read a key, write it and an
// index key) on each store, one writer:
//
//	go test -run '^$' -bench Update -benchtime 200x ./services/state/kvstate/
func BenchmarkUpdate(b *testing.B) {
	bolt, err := boltstate.Open(filepath.Join(b.TempDir(), "atlas-bench.db"), 0)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = bolt.Close() }()
	r1, err := kvstate.Open(context.Background(), meshtest.Conn(b, meshtest.NATS(b)), kvstate.Config{Bucket: "atlas_bench"})
	if err != nil {
		b.Fatal(err)
	}
	urls := cluster(b)
	nc, err := nats.Connect(urls[0])
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	var r3 *kvstate.Store
	for deadline := time.Now().Add(30 * time.Second); r3 == nil; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r3, err = kvstate.Open(ctx, nc, kvstate.Config{Bucket: "atlas_bench", Replicas: 3})
		cancel()
		if err != nil && time.Now().After(deadline) {
			b.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		s    state.Store
	}{{"bolt", bolt}, {"kv-R1", r1}, {"kv-R3", r3}} {
		b.Run(tc.name, func(b *testing.B) {
			for i := range b.N {
				err := tc.s.Update(context.Background(), func(tx state.Tx) error {
					bk := tx.Bucket("p", "t")
					k := fmt.Sprint("task_", i)
					if _, _, err := bk.Get(k); err != nil {
						return err
					}
					if err := bk.Put(k, []byte(`{"title":"x"}`)); err != nil {
						return err
					}
					return tx.Bucket("p", "idx").Put("2024-01-15\x00"+k, nil)
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScan lists a bucket of 1,000 keys (one View with one Scan) on a
// single server:
//
//	go test -run '^$' -bench Scan -benchtime 20x ./services/state/kvstate/
func BenchmarkScan(b *testing.B) {
	s, err := kvstate.Open(context.Background(), meshtest.Conn(b, meshtest.NATS(b)), kvstate.Config{Bucket: "atlas_scan"})
	if err != nil {
		b.Fatal(err)
	}
	const n = 1000
	for i := 0; i < n; i += 100 {
		if err := s.Update(context.Background(), func(tx state.Tx) error {
			for j := i; j < i+100; j++ {
				if err := tx.Bucket("p", "t").Put(fmt.Sprintf("task_%04d", j), []byte(`{"title":"x"}`)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		got := 0
		if err := s.View(context.Background(), func(tx state.Tx) error {
			got = 0
			return tx.Bucket("p", "t").Scan("", false, func(string, []byte) error { got++; return nil })
		}); err != nil {
			b.Fatal(err)
		}
		if got != n {
			b.Fatalf("scanned %d keys, want %d", got, n)
		}
	}
}
