package jskv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/jskv"
	"github.com/utpmesh/utpmesh/internal/meshtest"
)

// BenchmarkPurgeMarkers: one run over a bucket of 2,000 keys, R1, where
// "none" finds no marker (the hourly cost of a bucket kept clean) and
// "all" purges 2,000 markers.
//
//	go test -run '^$' -bench PurgeMarkers -benchtime 5x ./internal/jskv
func BenchmarkPurgeMarkers(b *testing.B) {
	const keys = 2000
	for _, deleted := range []bool{false, true} {
		name := "none"
		if deleted {
			name = "all"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			js, err := jetstream.New(meshtest.Conn(b, meshtest.NATS(b)))
			if err != nil {
				b.Fatal(err)
			}
			bk, err := jskv.Open(ctx, js, jskv.Config{Bucket: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				b.StopTimer()
				for i := range keys {
					k := fmt.Sprintf("demo.k%05d", i)
					if _, err := bk.KV.Put(ctx, k, []byte("value")); err != nil {
						b.Fatal(err)
					}
					if deleted {
						if err := bk.KV.Delete(ctx, k); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StartTimer()
				n, err := bk.PurgeMarkers(ctx, time.Now().Add(time.Hour))
				if err != nil || (deleted && n != keys) || (!deleted && n != 0) {
					b.Fatalf("PurgeMarkers = %d, %v", n, err)
				}
			}
		})
	}
}
