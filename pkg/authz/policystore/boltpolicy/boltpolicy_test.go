package boltpolicy_test

import (
	"context"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/boltpolicy"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/policystoretest"
)

var _ policystore.Store = (*boltpolicy.Store)(nil)

// TestConformance runs the policy store suite against bbolt files.
func TestConformance(t *testing.T) {
	policystoretest.Run(t, func(t *testing.T) policystoretest.Opener {
		path := filepath.Join(t.TempDir(), "policies.db")
		return func(t *testing.T, cfg policystoretest.Config) policystore.Store {
			var opts []boltpolicy.Option
			if cfg.Actions != nil {
				opts = append(opts, boltpolicy.WithActions(cfg.Actions))
			}
			if cfg.HistoryLimit != 0 {
				opts = append(opts, boltpolicy.WithHistoryLimit(cfg.HistoryLimit))
			}
			s, err := boltpolicy.Open(path, opts...)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	})
}

// TestOpenUnversioned: a policies.db written before the layout had a
// schema version (three buckets, no meta) opens with its data.
func TestOpenUnversioned(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "policies.db")
	s, err := boltpolicy.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutPolicies(ctx, "demo", `permit(principal, action == Action::"echo", resource);`); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Make it an old file: drop the meta bucket.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(boltfile.MetaBucket) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = boltpolicy.Open(path)
	if err != nil {
		t.Fatalf("open of an unversioned file: %v", err)
	}
	defer s.Close()
	if _, err := s.Policies(ctx, "demo"); err != nil {
		t.Fatalf("policies after adopting the file: %v", err)
	}
}
