// Package dirblob keeps blobs (package blob) as files of one local
// directory: the state engine's bolt mode, which one process serves. A
// blob is written to a temporary file, fsync'd and renamed into place, and
// the directory fsync'd, so a crash leaves either the whole blob or none.
package dirblob

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/utpmesh/utpmesh/services/state/blob"
)

// Store is a directory of blobs.
type Store struct {
	dir    string
	max    int64
	closed atomic.Bool
}

var _ blob.Store = (*Store)(nil)

// Open opens (creating it when missing) the directory dir; content over
// maxBytes is refused (0: blob.DefaultMaxBytes).
func Open(dir string, maxBytes int64) (*Store, error) {
	if dir == "" {
		return nil, errors.New("dirblob: no directory")
	}
	if maxBytes <= 0 {
		maxBytes = blob.DefaultMaxBytes
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("dirblob: %w", err)
	}
	return &Store{dir: dir, max: maxBytes}, nil
}

// Dir is the directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) check(ctx context.Context, name string) error {
	if s.closed.Load() {
		return blob.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return blob.CheckName(name)
}

// Put implements blob.Store.
func (s *Store) Put(ctx context.Context, name string, content []byte) error {
	if err := s.check(ctx, name); err != nil {
		return err
	}
	if err := blob.CheckSize(name, len(content), s.max); err != nil {
		return err
	}
	path := filepath.Join(s.dir, name)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	f, err := os.CreateTemp(s.dir, ".put-*")
	if err != nil {
		return fmt.Errorf("dirblob: put %s: %w", name, err)
	}
	tmp := f.Name()
	_, err = f.Write(content)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("dirblob: put %s: %w", name, err)
	}
	return syncDir(s.dir)
}

// Get implements blob.Store.
func (s *Store) Get(ctx context.Context, name string) ([]byte, error) {
	if err := s.check(ctx, name); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(s.dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", blob.ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("dirblob: get %s: %w", name, err)
	}
	return b, nil
}

// Delete implements blob.Store.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := s.check(ctx, name); err != nil {
		return err
	}
	err := os.Remove(filepath.Join(s.dir, name))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("dirblob: delete %s: %w", name, err)
	}
	return nil
}

// Close implements blob.Store.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("dirblob: sync %s: %w", dir, err)
	}
	return nil
}
