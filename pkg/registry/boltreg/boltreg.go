// Package boltreg is a registry.Registry stored in a bbolt file.
//
// Layout: bucket "tools" maps project_id + 0x00 + tool_name to the entry's
// JSON (registry.Entry, with updated_at); bucket "meta" holds
// "schema_version" (currently "1"). A file with another schema version is
// refused at Open. Writes are fsynced before Put and Delete return. Only
// one process can open the file at a time: bbolt takes an exclusive file
// lock, and Open gives up after the timeout (WithTimeout, default 1s) with
// an error saying the file is locked.
package boltreg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/pkg/registry"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// SchemaVersion is the storage layout version written to the meta bucket.
const SchemaVersion = "1"

// DefaultOpenTimeout is how long Open waits for the file lock.
const DefaultOpenTimeout = time.Second

var (
	bucketTools = []byte("tools")
)

// ErrLocked is matched by the Open error when another process (or another
// Store in this process) holds the file. It is internal/boltfile's value,
// shared by every bbolt file of the mesh.
var ErrLocked = boltfile.ErrLocked

// Store is a bbolt-backed registry. It is safe for concurrent use.
type Store struct {
	mu     sync.RWMutex // guards db against Close
	db     *bolt.DB
	clock  func() time.Time
	closed bool
}

var _ registry.Registry = (*Store)(nil)

// Option configures Open.
type Option func(*options)

type options struct {
	clock   func() time.Time
	timeout time.Duration
}

// WithClock sets the clock that stamps UpdatedAt (default time.Now).
func WithClock(clock func() time.Time) Option {
	return func(o *options) {
		if clock != nil {
			o.clock = clock
		}
	}
}

// WithTimeout sets how long Open waits for the file lock (default
// DefaultOpenTimeout; must be positive).
func WithTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.timeout = d
		}
	}
}

// Open opens or creates the store at path (mode 0600, parent directories
// created 0700) and checks its schema version.
func Open(path string, opts ...Option) (*Store, error) {
	o := options{clock: time.Now, timeout: DefaultOpenTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("boltreg: open %s: %w", path, err)
		}
	}
	db, err := boltfile.Open(path, boltfile.Options{Timeout: o.timeout, Schema: &boltfile.Schema{
		Kind: "registry", Version: SchemaVersion, Buckets: [][]byte{bucketTools},
	}})
	if err != nil {
		return nil, fmt.Errorf("boltreg: %w", err)
	}
	return &Store{db: db, clock: o.clock}, nil
}

// Close closes the file. Later calls fail with registry.ErrClosed. Close
// is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("boltreg: close: %w", err)
	}
	return nil
}

// key returns project_id + 0x00 + tool_name. Validated names never
// contain 0x00, so keys of different projects never collide and a
// project's keys are contiguous and sorted by tool_name.
func key(projectID, toolName string) []byte {
	k := make([]byte, 0, len(projectID)+1+len(toolName))
	k = append(k, projectID...)
	k = append(k, 0)
	return append(k, toolName...)
}

// view and update run fn under the close guard.
func (s *Store) view(fn func(b *bolt.Bucket) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return registry.ErrClosed
	}
	return s.db.View(func(tx *bolt.Tx) error { return fn(tx.Bucket(bucketTools)) })
}

func (s *Store) update(fn func(b *bolt.Bucket) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return registry.ErrClosed
	}
	return s.db.Update(func(tx *bolt.Tx) error { return fn(tx.Bucket(bucketTools)) })
}

// Put implements registry.Registry.
func (s *Store) Put(ctx context.Context, e *registry.Entry) (*registry.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := registry.Validate(e); err != nil {
		return nil, err
	}
	c := e.Clone()
	c.UpdatedAt = s.clock().UTC()
	data, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("boltreg: encode %s/%s: %w", c.ProjectID, c.ToolName, err)
	}
	// Round-trip so the returned entry is exactly what Get will return.
	out, err := decode(data)
	if err != nil {
		return nil, err
	}
	err = s.update(func(b *bolt.Bucket) error { return b.Put(key(c.ProjectID, c.ToolName), data) })
	if err != nil {
		return nil, wrap("put", err)
	}
	return out, nil
}

// Get implements registry.Registry.
func (s *Store) Get(ctx context.Context, projectID, toolName string) (*registry.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := registry.CheckKey(projectID, toolName); err != nil {
		return nil, err
	}
	var out *registry.Entry
	err := s.view(func(b *bolt.Bucket) error {
		v := b.Get(key(projectID, toolName))
		if v == nil {
			return registry.NotFound(projectID, toolName)
		}
		var err error
		out, err = decode(v)
		return err
	})
	if err != nil {
		return nil, wrap("get", err)
	}
	return out, nil
}

// List implements registry.Registry.
func (s *Store) List(ctx context.Context, projectID string) ([]*registry.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := registry.CheckProjectID(projectID); err != nil {
		return nil, err
	}
	prefix := key(projectID, "")
	out := []*registry.Entry{}
	err := s.view(func(b *bolt.Bucket) error {
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			e, err := decode(v)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, wrap("list", err)
	}
	return out, nil
}

// Delete implements registry.Registry.
func (s *Store) Delete(ctx context.Context, projectID, toolName string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := registry.CheckKey(projectID, toolName); err != nil {
		return err
	}
	err := s.update(func(b *bolt.Bucket) error {
		k := key(projectID, toolName)
		if b.Get(k) == nil {
			return registry.NotFound(projectID, toolName)
		}
		return b.Delete(k)
	})
	return wrap("delete", err)
}

// Check runs bbolt's consistency check over the whole file and returns the
// first problem found, if any.
func (s *Store) Check() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return registry.ErrClosed
	}
	return s.db.View(func(tx *bolt.Tx) error {
		var first error
		for err := range tx.Check() { // drain: the checker goroutine sends all
			if first == nil {
				first = fmt.Errorf("boltreg: consistency check: %w", err)
			}
		}
		return first
	})
}

func decode(v []byte) (*registry.Entry, error) {
	var e registry.Entry
	if err := json.Unmarshal(v, &e); err != nil {
		return nil, fmt.Errorf("boltreg: corrupt entry: %w", err)
	}
	return &e, nil
}

// wrap passes registry sentinels through unchanged and prefixes storage
// errors; bbolt's "database not open" becomes registry.ErrClosed.
func wrap(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, registry.ErrNotFound), errors.Is(err, registry.ErrClosed):
		return err
	case errors.Is(err, berrors.ErrDatabaseNotOpen):
		return fmt.Errorf("%w: %w", registry.ErrClosed, err)
	}
	return fmt.Errorf("boltreg: %s: %w", op, err)
}
