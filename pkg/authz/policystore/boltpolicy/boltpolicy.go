// Package boltpolicy keeps each project's Cedar policy set and
// authorization config in a bbolt file (the mesh's <DataDir>/policies.db):
// the policy store of a single-node mesh. It is storage only: the rules
// (validation, versions, base checks, rollback) are policystore.Versioned's,
// and it passes policystoretest.
//
// Layout: bucket policies/<project> holds the current authz.PolicyDoc
// (JSON), config/<project> the authz.ProjectConfig, and
// history/<project>/<version> the last HistoryLimit versions (the current
// one included). Reads are bbolt read transactions: many readers run at
// once; writes are serialized by bbolt, so a version and its history entry
// are one transaction. The file is opened by one process at a time (a
// second Open waits 5s, then fails with an error matching
// boltfile.ErrLocked).
package boltpolicy

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore"
)

// schemaVersion is the file layout: the policies, config and history
// buckets, and a meta bucket holding this version.
const schemaVersion = "1"

var (
	bucketPolicies = []byte("policies")
	bucketConfig   = []byte("config")
	bucketHistory  = []byte("history")
)

// Store is a bbolt-backed policystore.Store.
type Store struct {
	*policystore.Versioned
}

var _ policystore.Store = (*Store)(nil)

// Option configures Open.
type Option func(*policystore.Config)

// WithActions validates every put and rollback against the actions src
// lists for the project (authz.ValidateFor); without it any action named
// in a policy's scope is accepted.
func WithActions(src authz.ActionSource) Option {
	return func(c *policystore.Config) { c.Actions = src }
}

// WithHistoryLimit keeps n versions of each project's set (n >= 1;
// default policystore.HistoryLimit).
func WithHistoryLimit(n int) Option {
	return func(c *policystore.Config) {
		if n >= 1 {
			c.HistoryLimit = n
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
		return nil, fmt.Errorf("boltpolicy: %w", err)
	}
	cfg := policystore.Config{HistoryLimit: policystore.HistoryLimit}
	for _, o := range opts {
		o(&cfg)
	}
	return &Store{policystore.New(&file{db: db, keep: cfg.HistoryLimit}, cfg)}, nil
}

// file is the policystore.Backend of a bbolt file.
type file struct {
	db   *bolt.DB
	keep int

	// mu guards decoded: the last current document Current decoded per
	// project, with the bytes it was decoded from. The gate reads a
	// project's document on every call; while its bytes are unchanged
	// the decoded copy serves (a copy of it per read).
	mu      sync.Mutex
	decoded map[string]decodedDoc
}

// decodedDoc is a document Current decoded and the stored bytes it came
// from.
type decodedDoc struct {
	raw []byte
	doc authz.PolicyDoc
}

var _ policystore.Backend = (*file)(nil)

func (f *file) Close() error { return f.db.Close() }

func (f *file) view(fn func(*bolt.Tx) error) error {
	err := f.db.View(fn)
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return authz.ErrClosed
	}
	return err
}

func (f *file) update(fn func(*bolt.Tx) error) error {
	err := f.db.Update(fn)
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return authz.ErrClosed
	}
	return err
}

// decodeDoc decodes a stored document (policystore.DecodeDoc).
func decodeDoc(project string, v []byte) (*authz.PolicyDoc, error) {
	return policystore.DecodeDoc("boltpolicy", project, v)
}

// current decodes the project's current document in tx; nil when none.
func current(tx *bolt.Tx, project string) (*authz.PolicyDoc, error) {
	v := tx.Bucket(bucketPolicies).Get([]byte(project))
	if v == nil {
		return nil, nil
	}
	return decodeDoc(project, v)
}

// Current implements policystore.Backend. A document whose stored bytes
// are those Current decoded last for the project is not decoded again.
func (f *file) Current(_ context.Context, project string) (*authz.PolicyDoc, error) {
	var doc *authz.PolicyDoc
	err := f.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketPolicies).Get([]byte(project))
		if v == nil {
			return nil
		}
		f.mu.Lock()
		d, ok := f.decoded[project]
		f.mu.Unlock()
		if ok && bytes.Equal(d.raw, v) {
			c := d.doc
			doc = &c
			return nil
		}
		dec, err := decodeDoc(project, v)
		if err != nil {
			return err
		}
		f.mu.Lock()
		if f.decoded == nil {
			f.decoded = map[string]decodedDoc{}
		}
		f.decoded[project] = decodedDoc{raw: bytes.Clone(v), doc: *dec}
		f.mu.Unlock()
		doc = dec
		return nil
	})
	return doc, err
}

// Update implements policystore.Backend: one bbolt write transaction.
func (f *file) Update(_ context.Context, project string, next func(*authz.PolicyDoc) (*authz.PolicyDoc, error)) error {
	return f.update(func(tx *bolt.Tx) error {
		old, err := current(tx, project)
		if err != nil {
			return err
		}
		doc, err := next(old)
		if err != nil || doc == nil {
			return err
		}
		v, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketPolicies).Put([]byte(project), v); err != nil {
			return err
		}
		return f.keepVersion(tx, project, old, doc.Version, v)
	})
}

func versionKey(v uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], v)
	return k[:]
}

// keepVersion adds version v (JSON doc) to the project's history, first
// adding the previous current doc when an older file has no history of
// it, and drops versions beyond the limit.
func (f *file) keepVersion(tx *bolt.Tx, project string, old *authz.PolicyDoc, v uint64, doc []byte) error {
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
	for i := 0; i < len(keys)-f.keep; i++ {
		if err := h.Delete(keys[i]); err != nil {
			return err
		}
	}
	return nil
}

// Versions implements policystore.Backend: the history bucket, plus the
// current document when a file written before history was kept has no
// entry for it.
func (f *file) Versions(_ context.Context, project string) ([]*authz.PolicyDoc, error) {
	var out []*authz.PolicyDoc
	err := f.view(func(tx *bolt.Tx) error {
		cur, err := current(tx, project)
		if err != nil {
			return err
		}
		h := tx.Bucket(bucketHistory).Bucket([]byte(project))
		if cur != nil && (h == nil || h.Get(versionKey(cur.Version)) == nil) {
			out = append(out, cur) // written before history was kept
		}
		if h == nil {
			return nil
		}
		c := h.Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			d, err := decodeDoc(project, v)
			if err != nil {
				return err
			}
			out = append(out, d)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Version > out[j].Version })
	return out, nil
}

// Config implements policystore.Backend.
func (f *file) Config(_ context.Context, project string) (authz.ProjectConfig, bool, error) {
	var c authz.ProjectConfig
	found := false
	err := f.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketConfig).Get([]byte(project))
		if v == nil {
			return nil
		}
		found = true
		return json.Unmarshal(v, &c)
	})
	return c, found, err
}

// PutConfig implements policystore.Backend.
func (f *file) PutConfig(_ context.Context, project string, c authz.ProjectConfig) error {
	v, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return f.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketConfig).Put([]byte(project), v) })
}
