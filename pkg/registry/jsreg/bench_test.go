package jsreg_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/utpmesh/utpmesh/internal/jskv/jskvtest"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/registry/boltreg"
	"github.com/utpmesh/utpmesh/pkg/registry/jsreg"
	"github.com/utpmesh/utpmesh/pkg/registry/registrytest"
)

// backend opens a registry to compare: bbolt (the embedded default) or
// JetStream KV on a single in-process server (fsync before ack, R1).
func backend(b *testing.B, name string) registry.Registry {
	if name == "jsreg" {
		return open(b, meshtest.NATS(b), jsreg.Config{Bucket: freshBucket()})
	}
	bolt, err := boltreg.Open(filepath.Join(b.TempDir(), "registry.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bolt.Close() })
	return bolt
}

// BenchmarkRegistry measures Get, Put and List (20 tools) of each backend:
//
//	go test -run '^$' -bench Registry -benchtime 2s ./pkg/registry/jsreg/
func BenchmarkRegistry(b *testing.B) {
	ctx := context.Background()
	for _, name := range []string{"boltreg", "jsreg"} {
		r := backend(b, name)
		for i := range 20 {
			if _, err := r.Put(ctx, registrytest.NewEntry("demo", fmt.Sprintf("tool_%02d", i))); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(name+"/Get", func(b *testing.B) {
			for b.Loop() {
				if _, err := r.Get(ctx, "demo", "tool_07"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/GetParallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := r.Get(ctx, "demo", "tool_07"); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run(name+"/Put", func(b *testing.B) {
			e := registrytest.NewEntry("demo", "tool_07")
			for b.Loop() {
				if _, err := r.Put(ctx, e); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/List20", func(b *testing.B) {
			for b.Loop() {
				if l, err := r.List(ctx, "demo"); err != nil || len(l) != 20 {
					b.Fatal(len(l), err)
				}
			}
		})
	}
}

// BenchmarkClusterRegistry measures Get and Put of an R3 bucket on an
// in-process 3-node cluster, through each node (one is the stream
// leader, two are followers):
//
//	go test -run '^$' -bench ClusterRegistry -benchtime 1s ./pkg/registry/jsreg/
func BenchmarkClusterRegistry(b *testing.B) {
	ctx := context.Background()
	c := jskvtest.Start(b)
	bucket := freshBucket()
	for i := range c.Servers {
		r := openOn(b, c, i, bucket)
		if _, err := r.Put(ctx, registrytest.NewEntry("demo", "echo")); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("node%d/Get", i+1), func(b *testing.B) {
			for b.Loop() {
				if _, err := r.Get(ctx, "demo", "echo"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("node%d/Put", i+1), func(b *testing.B) {
			e := registrytest.NewEntry("demo", "echo")
			for b.Loop() {
				if _, err := r.Put(ctx, e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
