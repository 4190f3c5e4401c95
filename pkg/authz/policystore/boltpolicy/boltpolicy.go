// Package policystore keeps each project's Cedar policy set and
// authorization config in a bbolt file (the mesh's <DataDir>/policies.db).
//
// A put validates the policy text (syntax, then the mesh schema; errors
// name the line and column) before anything is written, so the gate only
// ever reads policy sets that parsed. With WithActions the schema check is
// against the project's tools: a policy naming an action no tool has is
// refused. Each put of a new text bumps the project's version, which the
// gate uses to reparse a set only when it changed; a put of the stored
// text changes nothing. The last HistoryLimit versions of each project are
// kept (bucket history/<project>/<version>) and can be restored with
// Rollback, which stores the old text as a new version. Reads are bbolt read
// transactions: many readers run at once; writes are serialized by bbolt.
// The file is opened by one process at a time (a second Open waits 5s,
// then fails with an error matching boltfile.ErrLocked).
package policystore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/subjects"
)

// schemaVersion is the file layout: the policies, config and history
// buckets, and a meta bucket holding this version.
const schemaVersion = "1"

var (
	bucketPolicies = []byte("policies")
	bucketConfig   = []byte("config")
	bucketHistory  = []byte("history")
)

// MaxPolicyBytes bounds one project's policy text (authz.MaxPolicyBytes).
const MaxPolicyBytes = authz.MaxPolicyBytes

// HistoryLimit is how many versions of each project's policy set are kept
// by default (the current one included).
const HistoryLimit = 20

// Store is a bbolt-backed authz.PolicyHistory.
type Store struct {
	db      *bolt.DB
	now     func() time.Time
	actions authz.ActionSource
	keep    int
}

var _ authz.PolicyHistory = (*Store)(nil)

// Option configures Open.
type Option func(*Store)

// WithActions validates every put and rollback against the actions src
// lists for the project (authz.ValidateFor); without it any action named
// in a policy's scope is accepted.
func WithActions(src authz.ActionSource) Option { return func(s *Store) { s.actions = src } }

// WithHistoryLimit keeps n versions of each project's set (n >= 1;
// default HistoryLimit).
func WithHistoryLimit(n int) Option {
	return func(s *Store) {
		if n >= 1 {
			s.keep = n
		}
	}
}

// Open opens (creating if needed) the store at path, waiting up to 5s for
// another process's lock.
func Open(path string, opts ...Option) (*Store, error) {
	// Files written before the layout was versioned have no meta bucket;
	// Adopt stamps them with version 1 (their layout).
	db, err := boltfile.Open(path, boltfile.Options{Schema: &boltfile.Schema{
		Kind: "policystore", Version: schemaVersion, Adopt: true,
		Buckets: [][]byte{bucketPolicies, bucketConfig, bucketHistory},
	}})
	if err != nil {
		return nil, fmt.Errorf("policystore: %w", err)
	}
	s := &Store{db: db, now: time.Now, keep: HistoryLimit}
	for _, o := range opts {
		o(s)
	}
	return s, nil
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
// it as the project's policy set, whatever version is stored.
func (s *Store) PutPolicies(ctx context.Context, project, text string) (*authz.PolicyDoc, error) {
	return s.write(ctx, project, text, nil, 0)
}

// ReplacePolicies implements authz.PolicyHistory.
func (s *Store) ReplacePolicies(ctx context.Context, project, text string, base uint64) (*authz.PolicyDoc, error) {
	return s.write(ctx, project, text, &base, 0)
}

// Rollback implements authz.PolicyHistory.
func (s *Store) Rollback(ctx context.Context, project string, version, base uint64) (*authz.PolicyDoc, error) {
	old, err := s.PolicyVersion(ctx, project, version)
	if err != nil {
		return nil, err
	}
	return s.write(ctx, project, old.Policies, &base, version)
}

// validate checks text against the schema and, with WithActions, the
// project's tools.
func (s *Store) validate(ctx context.Context, project, text string) error {
	return authz.ValidateStored(ctx, s.actions, project, text)
}

// write validates text and stores it as the next version (unless it is
// the stored text), checking base when given and recording rolledBack.
func (s *Store) write(ctx context.Context, project, text string, base *uint64, rolledBack uint64) (*authz.PolicyDoc, error) {
	if err := checkProject(project); err != nil {
		return nil, err
	}
	if err := s.validate(ctx, project, text); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(text))
	doc := &authz.PolicyDoc{Project: project, Policies: text, SHA256: hex.EncodeToString(sum[:]), UpdatedAt: s.now().UTC(), RolledBackFrom: rolledBack}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPolicies)
		var old *authz.PolicyDoc
		if v := b.Get([]byte(project)); v != nil {
			old = new(authz.PolicyDoc)
			if err := json.Unmarshal(v, old); err != nil {
				return fmt.Errorf("policystore: stored policies of %s: %w", project, err)
			}
		}
		var cur uint64
		if old != nil {
			cur = old.Version
		}
		if base != nil && *base != cur {
			return fmt.Errorf("%w: %s is at version %d, not %d as when you looked; review it again (utpmesh policy get --project %s)", authz.ErrConflict, project, cur, *base, project)
		}
		if old != nil && old.SHA256 == doc.SHA256 {
			doc = old // the stored text: nothing changes
			return nil
		}
		doc.Version = cur + 1
		v, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		if err := b.Put([]byte(project), v); err != nil {
			return err
		}
		return s.keepVersion(tx, project, old, doc.Version, v)
	})
	if err != nil {
		return nil, err
	}
	return doc, nil
}

func versionKey(v uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], v)
	return k[:]
}

// keepVersion adds version v (JSON doc) to the project's history, first
// adding the previous current doc when an older file has no history of
// it, and drops versions beyond the limit.
func (s *Store) keepVersion(tx *bolt.Tx, project string, old *authz.PolicyDoc, v uint64, doc []byte) error {
	h, err := tx.Bucket(bucketHistory).CreateBucketIfNotExists([]byte(project))
	if err != nil {
		return err
	}
	if old != nil && h.Get(versionKey(old.Version)) == nil {
		ov, err := json.Marshal(old)
		if err != nil {
			return err
		}
		if err := h.Put(versionKey(old.Version), ov); err != nil {
			return err
		}
	}
	if err := h.Put(versionKey(v), doc); err != nil {
		return err
	}
	var keys [][]byte
	c := h.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
	}
	for i := 0; i < len(keys)-s.keep; i++ {
		if err := h.Delete(keys[i]); err != nil {
			return err
		}
	}
	return nil
}

// History implements authz.PolicyHistory: the kept versions, newest
// first; a project without a policy set has an empty history.
func (s *Store) History(ctx context.Context, project string) ([]authz.PolicyVersion, error) {
	if err := checkProject(project); err != nil {
		return nil, err
	}
	var out []authz.PolicyVersion
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var cur authz.PolicyDoc
		if v := tx.Bucket(bucketPolicies).Get([]byte(project)); v != nil {
			if err := json.Unmarshal(v, &cur); err != nil {
				return err
			}
		}
		add := func(d *authz.PolicyDoc) {
			out = append(out, authz.PolicyVersion{Version: d.Version, SHA256: d.SHA256, UpdatedAt: d.UpdatedAt,
				Bytes: len(d.Policies), RolledBackFrom: d.RolledBackFrom, Current: d.Version == cur.Version})
		}
		h := tx.Bucket(bucketHistory).Bucket([]byte(project))
		if h == nil || h.Get(versionKey(cur.Version)) == nil {
			if cur.Version > 0 { // written before history was kept
				add(&cur)
			}
		}
		if h == nil {
			return nil
		}
		c := h.Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			var d authz.PolicyDoc
			if err := json.Unmarshal(v, &d); err != nil {
				return err
			}
			add(&d)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Version > out[j].Version })
	return out, nil
}

// PolicyVersion implements authz.PolicyHistory.
func (s *Store) PolicyVersion(ctx context.Context, project string, version uint64) (*authz.PolicyDoc, error) {
	if err := checkProject(project); err != nil {
		return nil, err
	}
	if version == 0 {
		return nil, fmt.Errorf("%w: version must be 1 or more (utpmesh policy history --project %s lists them)", authz.ErrInvalidRequest, project)
	}
	var doc *authz.PolicyDoc
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var v []byte
		if h := tx.Bucket(bucketHistory).Bucket([]byte(project)); h != nil {
			v = h.Get(versionKey(version))
		}
		if v == nil {
			if cur := tx.Bucket(bucketPolicies).Get([]byte(project)); cur != nil {
				var d authz.PolicyDoc
				if err := json.Unmarshal(cur, &d); err == nil && d.Version == version {
					v = cur
				}
			}
		}
		if v == nil {
			return fmt.Errorf("%w: version %d of %s's policies is not kept (the last %d are; utpmesh policy history --project %s lists them)", authz.ErrNotFound, version, project, s.keep, project)
		}
		doc = new(authz.PolicyDoc)
		return json.Unmarshal(v, doc)
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
