package jsreg_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/utpmesh/utpmesh/internal/jskv/jskvtest"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/registry/jsreg"
	"github.com/utpmesh/utpmesh/pkg/registry/registrytest"
)

// openOn opens a store with an R3 bucket over a new connection to node i.
func openOn(t testing.TB, c *jskvtest.Cluster, i int, bucket string) *jsreg.Store {
	t.Helper()
	s, err := jsreg.Open(context.Background(), c.JetStream(t, i%len(c.Servers)), jsreg.Config{Bucket: bucket, Replicas: 3})
	if err != nil {
		t.Fatalf("Open on node %d: %v", i%len(c.Servers), err)
	}
	return s
}

// TestClusterConformance runs registrytest on a 3-node cluster with R3
// buckets, each store connected to another node.
func TestClusterConformance(t *testing.T) {
	c := jskvtest.Start(t)
	n := 0
	registrytest.Run(t, func(t *testing.T) registry.Registry {
		n++
		return openOn(t, c, n, freshBucket())
	})
}

// TestClusterReadAfterWrite: a Put through one node is seen by a Get and a
// List through the other two right after it returns.
func TestClusterReadAfterWrite(t *testing.T) {
	ctx := context.Background()
	c := jskvtest.Start(t)
	b := freshBucket()
	nodes := []*jsreg.Store{openOn(t, c, 0, b), openOn(t, c, 1, b), openOn(t, c, 2, b)}
	for i := range 60 {
		e := registrytest.NewEntry("demo", "echo")
		e.Description = fmt.Sprintf("v%d", i)
		if _, err := nodes[i%3].Put(ctx, e); err != nil {
			t.Fatal(err)
		}
		for j := 1; j <= 2; j++ {
			got, err := nodes[(i+j)%3].Get(ctx, "demo", "echo")
			if err != nil || got.Description != e.Description {
				t.Fatalf("put %d via node %d, Get via node %d = %v, %v; want %s", i, i%3, (i+j)%3, got, err, e.Description)
			}
			list, err := nodes[(i+j)%3].List(ctx, "demo")
			if err != nil || len(list) != 1 || list[0].Description != e.Description {
				t.Fatalf("put %d via node %d, List via node %d = %v, %v", i, i%3, (i+j)%3, list, err)
			}
		}
	}
}
