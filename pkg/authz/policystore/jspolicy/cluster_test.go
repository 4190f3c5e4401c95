package jspolicy_test

import (
	"context"
	"testing"

	"github.com/utpmesh/utpmesh/internal/jskv/jskvtest"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/jspolicy"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/policystoretest"
)

// openOn opens a store with an R3 bucket over a new connection to node i.
func openOn(t testing.TB, c *jskvtest.Cluster, i int, cfg jspolicy.Config) *jspolicy.Store {
	t.Helper()
	cfg.Replicas = 3
	s, err := jspolicy.Open(context.Background(), c.JetStream(t, i%len(c.Servers)), cfg)
	if err != nil {
		t.Fatalf("Open on node %d: %v", i%len(c.Servers), err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestClusterConformance runs policystoretest on a 3-node cluster with R3
// buckets; every (re)open connects to the next node.
func TestClusterConformance(t *testing.T) {
	c := jskvtest.Start(t)
	n := 0
	policystoretest.Run(t, func(t *testing.T) policystoretest.Opener {
		bucket := freshBucket()
		return func(t *testing.T, cfg policystoretest.Config) policystore.Store {
			n++
			return openOn(t, c, n, jspolicy.Config{Bucket: bucket, HistoryLimit: cfg.HistoryLimit, Actions: cfg.Actions})
		}
	})
}

// TestClusterReadAfterWrite: a put through one node is what the gate's
// reads (Policies, Config) and History through the other two return right
// after it.
func TestClusterReadAfterWrite(t *testing.T) {
	ctx := context.Background()
	c := jskvtest.Start(t)
	b := freshBucket()
	nodes := []*jspolicy.Store{openOn(t, c, 0, jspolicy.Config{Bucket: b}), openOn(t, c, 1, jspolicy.Config{Bucket: b}), openOn(t, c, 2, jspolicy.Config{Bucket: b})}
	modes := []authz.MandateMode{authz.MandateRequired, authz.MandateNotRequired}
	for i := 1; i <= 40; i++ {
		w := nodes[i%3]
		if _, err := w.ReplacePolicies(ctx, "demo", policystoretest.Policy(i), uint64(i-1)); err != nil {
			t.Fatal(err)
		}
		if err := w.PutConfig(ctx, "demo", authz.ProjectConfig{Mandate: modes[i%2]}); err != nil {
			t.Fatal(err)
		}
		for j := 1; j <= 2; j++ {
			r := nodes[(i+j)%3]
			if d, err := r.Policies(ctx, "demo"); err != nil || d.Version != uint64(i) {
				t.Fatalf("put %d via node %d, Policies via node %d = %+v, %v", i, i%3, (i+j)%3, d, err)
			}
			if cfg, err := r.Config(ctx, "demo"); err != nil || cfg.Mandate != modes[i%2] {
				t.Fatalf("config put %d via node %d, Config via node %d = %+v, %v", i, i%3, (i+j)%3, cfg, err)
			}
			if h, err := r.History(ctx, "demo"); err != nil || len(h) == 0 || h[0].Version != uint64(i) {
				t.Fatalf("put %d via node %d, History via node %d = %+v, %v", i, i%3, (i+j)%3, h, err)
			}
		}
	}
}
