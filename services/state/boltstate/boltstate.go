// Package boltstate keeps a tool service's state (package state) in one
// local bbolt file, the layout the ATLAS services have always used: a
// top-level bucket "p:<project>" per project, holding one nested bucket per
// name, holding the keys. Files written before the state interface existed
// open unchanged.
//
// bbolt lets one process open a file; a second Open of the same file waits
// for the lock and fails with boltfile.ErrLocked. That guards one host and
// one data directory only: internal/kit also takes a holder lease in the
// CardStore, so that a second worker of the group elsewhere is refused.
package boltstate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/services/state"
)

// projectPrefix prefixes the name of a project's top-level bucket.
const projectPrefix = "p:"

// Store is a bbolt file holding a group's state.
type Store struct {
	db *bolt.DB
}

var _ state.Store = (*Store)(nil)

// Open opens (creating it when missing) the bbolt file at path, waiting at
// most timeout for its lock (0: boltfile.DefaultTimeout).
func Open(path string, timeout time.Duration) (*Store, error) {
	db, err := boltfile.Open(path, boltfile.Options{Timeout: timeout})
	if err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

// DB is the underlying bbolt file (tests and tools that read it directly).
func (s *Store) DB() *bolt.DB { return s.db }

// View runs fn in a bbolt read transaction.
func (s *Store) View(ctx context.Context, fn func(state.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return mapErr(s.db.View(func(btx *bolt.Tx) error { return fn(&tx{btx: btx}) }))
}

// Update runs fn in a bbolt write transaction (fn runs exactly once).
func (s *Store) Update(ctx context.Context, fn func(state.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return mapErr(s.db.Update(func(btx *bolt.Tx) error { return fn(&tx{btx: btx}) }))
}

// Close closes the file; it is idempotent.
func (s *Store) Close() error { return s.db.Close() }

func mapErr(err error) error {
	if errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
		return fmt.Errorf("%w: %w", state.ErrClosed, err)
	}
	return err
}

type tx struct{ btx *bolt.Tx }

func (t *tx) Writable() bool { return t.btx.Writable() }

func (t *tx) Bucket(project, name string) state.Bucket {
	return &bucket{tx: t.btx, top: []byte(projectPrefix + project), name: []byte(name)}
}

func (t *tx) Projects() ([]string, error) {
	var out []string
	err := t.btx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		if p, ok := strings.CutPrefix(string(name), projectPrefix); ok {
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// bucket finds its bbolt bucket on every call: a read of a missing bucket
// sees nothing, the first write creates it.
type bucket struct {
	tx        *bolt.Tx
	top, name []byte
}

func (b *bucket) find() *bolt.Bucket {
	p := b.tx.Bucket(b.top)
	if p == nil {
		return nil
	}
	return p.Bucket(b.name)
}

func (b *bucket) create() (*bolt.Bucket, error) {
	if !b.tx.Writable() {
		return nil, state.ErrReadOnly
	}
	p, err := b.tx.CreateBucketIfNotExists(b.top)
	if err != nil {
		return nil, err
	}
	return p.CreateBucketIfNotExists(b.name)
}

func (b *bucket) Get(key string) ([]byte, bool, error) {
	bb := b.find()
	if bb == nil {
		return nil, false, nil
	}
	// A cursor tells an empty value from an absent key.
	k, v := bb.Cursor().Seek([]byte(key))
	if k == nil || string(k) != key {
		return nil, false, nil
	}
	if v == nil {
		v = []byte{}
	}
	return v, true, nil
}

func (b *bucket) Put(key string, value []byte) error {
	if key == "" {
		return errors.New("state: empty key")
	}
	bb, err := b.create()
	if err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	return bb.Put([]byte(key), value)
}

func (b *bucket) Delete(key string) error {
	if !b.tx.Writable() {
		return state.ErrReadOnly
	}
	bb := b.find()
	if bb == nil {
		return nil
	}
	return bb.Delete([]byte(key))
}

func (b *bucket) Scan(prefix string, reverse bool, fn func(string, []byte) error) error {
	bb := b.find()
	if bb == nil {
		return nil
	}
	c := bb.Cursor()
	p := []byte(prefix)
	var k, v []byte
	if !reverse {
		k, v = c.Seek(p)
	} else if end := prefixEnd(p); end == nil {
		k, v = c.Last()
	} else if k, _ = c.Seek(end); k == nil {
		k, v = c.Last()
	} else {
		k, v = c.Prev()
	}
	for ; k != nil && bytes.HasPrefix(k, p); k, v = step(c, reverse) {
		if v == nil {
			v = []byte{}
		}
		if err := fn(string(k), v); err != nil {
			if errors.Is(err, state.ErrStop) {
				return nil
			}
			return err
		}
	}
	return nil
}

func step(c *bolt.Cursor, reverse bool) ([]byte, []byte) {
	if reverse {
		return c.Prev()
	}
	return c.Next()
}

// prefixEnd returns the smallest key greater than every key with prefix p,
// or nil when there is none (p empty or all 0xff).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
