package jspolicy_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/boltpolicy"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/jspolicy"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/policystoretest"
)

// backend opens a policy store to compare: bbolt (the embedded default) or
// JetStream KV on a single in-process server (fsync before ack, R1), with
// leader reads or DirectReads.
func backend(b *testing.B, name string) policystore.Store {
	switch name {
	case "jspolicy":
		return open(b, meshtest.NATS(b), jspolicy.Config{Bucket: freshBucket()})
	case "jspolicy-direct":
		return open(b, meshtest.NATS(b), jspolicy.Config{Bucket: freshBucket(), DirectReads: true})
	}
	s, err := boltpolicy.Open(filepath.Join(b.TempDir(), "policies.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkPolicies measures the gate's per-call read (Policies + Config)
// and a put of a new version (validation included) of each backend:
//
//	go test -run '^$' -bench Policies -benchtime 2s ./pkg/authz/policystore/jspolicy/
func BenchmarkPolicies(b *testing.B) {
	ctx := context.Background()
	for _, name := range []string{"boltpolicy", "jspolicy", "jspolicy-direct"} {
		s := backend(b, name)
		if _, err := s.PutPolicies(ctx, "demo", policystoretest.Policy(0)); err != nil {
			b.Fatal(err)
		}
		b.Run(name+"/GateRead", func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Policies(ctx, "demo"); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Config(ctx, "demo"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/Put", func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				if _, err := s.PutPolicies(ctx, "demo", policystoretest.Policy(i)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/History20", func(b *testing.B) {
			for b.Loop() {
				if h, err := s.History(ctx, "demo"); err != nil || len(h) != 20 {
					b.Fatal(len(h), err)
				}
			}
		})
	}
}
