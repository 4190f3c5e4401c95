// Package policystore keeps each project's Cedar policy set and
// authorization config in a bbolt file (the mesh's <DataDir>/policies.db).
//
// A put validates the policy text (syntax, then the mesh schema; errors
// name the line) before anything is written, so the gate only ever reads
// policy sets that parsed. Each put bumps the project's version, which the
// gate uses to reparse a set only when it changed. Reads are bbolt read
// transactions: many readers run at once; writes are serialized by bbolt.
// The file is opened by one process at a time (a second Open waits for
// Timeout, then fails).
package policystore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/subjects"
)

var (
	bucketPolicies = []byte("policies")
	bucketConfig   = []byte("config")
)

// MaxPolicyBytes bounds one project's policy text.
const MaxPolicyBytes = 256 << 10

// Store is a bbolt-backed authz.PolicyStore.
type Store struct {
	db  *bolt.DB
	now func() time.Time
}

var _ authz.PolicyStore = (*Store)(nil)

// Open opens (creating if needed) the store at path, waiting up to 5s for
// another process's lock.
func Open(path string) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("policystore: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketPolicies, bucketConfig} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("policystore: init %s: %w", path, err)
	}
	return &Store{db: db, now: time.Now}, nil
}

// Close closes the file.
func (s *Store) Close() error { return s.db.Close() }

func checkProject(project string) error {
	if err := subjects.ValidateToken("project_id", project); err != nil {
		return fmt.Errorf("%w: %v", authz.ErrInvalidRequest, err)
	}
	return nil
}

func (s *Store) view(ctx context.Context, f func(*bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.db.View(f)
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return authz.ErrClosed
	}
	return err
}

func (s *Store) update(ctx context.Context, f func(*bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.db.Update(f)
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return authz.ErrClosed
	}
	return err
}

// Policies implements authz.PolicySource.
func (s *Store) Policies(ctx context.Context, project string) (*authz.PolicyDoc, error) {
	if err := checkProject(project); err != nil {
		return nil, err
	}
	var doc *authz.PolicyDoc
	err := s.view(ctx, func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketPolicies).Get([]byte(project))
		if v == nil {
			return fmt.Errorf("%w: project %s has no policy set (utpmesh policy put --project %s FILE)", authz.ErrNotFound, project, project)
		}
		doc = new(authz.PolicyDoc)
		return json.Unmarshal(v, doc)
	})
	if err != nil {
		return nil, err
	}
	return doc, nil
}

// PutPolicies implements authz.PolicyStore: it validates text and stores
// it as the project's policy set.
func (s *Store) PutPolicies(ctx context.Context, project, text string) (*authz.PolicyDoc, error) {
	if err := checkProject(project); err != nil {
		return nil, err
	}
	if len(text) > MaxPolicyBytes {
		return nil, fmt.Errorf("%w: policies are %d bytes, the limit is %d", authz.ErrInvalidPolicy, len(text), MaxPolicyBytes)
	}
	if _, err := authz.ParseAndValidate("policies", text); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(text))
	doc := &authz.PolicyDoc{Project: project, Policies: text, SHA256: hex.EncodeToString(sum[:]), UpdatedAt: s.now().UTC()}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPolicies)
		if v := b.Get([]byte(project)); v != nil {
			var old authz.PolicyDoc
			if err := json.Unmarshal(v, &old); err == nil {
				doc.Version = old.Version
			}
		}
		doc.Version++
		v, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		return b.Put([]byte(project), v)
	})
	if err != nil {
		return nil, err
	}
	return doc, nil
}

// Config implements authz.PolicySource.
func (s *Store) Config(ctx context.Context, project string) (authz.ProjectConfig, error) {
	var c authz.ProjectConfig
	if err := checkProject(project); err != nil {
		return c, err
	}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketConfig).Get([]byte(project)); v != nil {
			return json.Unmarshal(v, &c)
		}
		return nil
	})
	if c.Mandate == "" {
		c.Mandate = authz.MandateRequired
	}
	return c, err
}

// PutConfig implements authz.PolicyStore.
func (s *Store) PutConfig(ctx context.Context, project string, c authz.ProjectConfig) error {
	if err := checkProject(project); err != nil {
		return err
	}
	if err := c.Check(); err != nil {
		return err
	}
	if c.Mandate == "" {
		c.Mandate = authz.MandateRequired
	}
	v, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return s.update(ctx, func(tx *bolt.Tx) error { return tx.Bucket(bucketConfig).Put([]byte(project), v) })
}
