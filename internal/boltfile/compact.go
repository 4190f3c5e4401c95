package boltfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// CompactResult is what Compact did to one file.
type CompactResult struct {
	Path string
	// Before and After are the file's sizes in bytes.
	Before, After int64
	// Keys counts the key/value pairs copied (nested buckets included);
	// the copy was checked to hold the same ones.
	Keys int
}

// Compact rewrites the bbolt file at path into a new file holding only
// its live pages (bbolt's Compact), checks the copy (bbolt's page
// consistency check, and the same key/value pairs, bucket by bucket, as
// the original), syncs it and renames it over the original; the
// directory is synced too. A failure before the rename leaves the
// original untouched (and removes the copy). The file must not be open
// anywhere: the caller holds the data directory's lock (internal/datalock)
// so no mesh runs on it; bbolt's own lock refuses a file held open
// elsewhere with ErrLocked after timeout (0: DefaultTimeout).
func Compact(path string, timeout time.Duration) (*CompactResult, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("compact: %w", err)
	}
	src, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, ReadOnly: true})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("compact %s: %w (is the mesh running? stop it first)", path, ErrLocked)
		}
		return nil, fmt.Errorf("compact %s: %w", path, err)
	}
	defer src.Close()
	tmp := path + ".compact"
	_ = os.Remove(tmp) // a copy left by a crash
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: timeout, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return nil, fmt.Errorf("compact %s: create %s: %w", path, tmp, err)
	}
	fail := func(err error) (*CompactResult, error) {
		_ = dst.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("compact %s: %w", path, err)
	}
	if err := bolt.Compact(dst, src, 64<<20); err != nil {
		return fail(err)
	}
	keys, err := sameContent(src, dst)
	if err != nil {
		return fail(err)
	}
	if err := dst.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return fmt.Errorf("the copy fails bbolt's consistency check: %w", err)
		}
		return nil
	}); err != nil {
		return fail(err)
	}
	if err := dst.Sync(); err != nil {
		return fail(err)
	}
	if err := dst.Close(); err != nil {
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("compact %s: %w", path, err)
	}
	_ = src.Close()
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("compact %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	after, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("compact: %w", err)
	}
	return &CompactResult{Path: path, Before: st.Size(), After: after.Size(), Keys: keys}, nil
}

// sameContent walks both files' buckets in step and fails at the first
// difference; it returns how many key/value pairs they hold.
func sameContent(a, b *bolt.DB) (int, error) {
	n := 0
	err := a.View(func(ta *bolt.Tx) error {
		return b.View(func(tb *bolt.Tx) error {
			ca, cb := ta.Cursor(), tb.Cursor()
			ka, _ := ca.First()
			kb, _ := cb.First()
			for ka != nil || kb != nil {
				if !bytes.Equal(ka, kb) {
					return fmt.Errorf("the copy's buckets differ: %q and %q", ka, kb)
				}
				m, err := sameBucket(ta.Bucket(ka), tb.Bucket(kb), string(ka))
				if err != nil {
					return err
				}
				n += m
				ka, _ = ca.Next()
				kb, _ = cb.Next()
			}
			return nil
		})
	})
	return n, err
}

func sameBucket(a, b *bolt.Bucket, name string) (int, error) {
	if a == nil || b == nil {
		return 0, fmt.Errorf("the copy lacks bucket %q", name)
	}
	if a.Sequence() != b.Sequence() {
		return 0, fmt.Errorf("bucket %q: sequence %d in the copy, %d in the original", name, b.Sequence(), a.Sequence())
	}
	n := 0
	ca, cb := a.Cursor(), b.Cursor()
	ka, va := ca.First()
	kb, vb := cb.First()
	for ka != nil || kb != nil {
		if !bytes.Equal(ka, kb) || !bytes.Equal(va, vb) || (va == nil) != (vb == nil) {
			return 0, fmt.Errorf("bucket %q: key %q differs in the copy", name, ka)
		}
		if va == nil { // a nested bucket
			m, err := sameBucket(a.Bucket(ka), b.Bucket(kb), name+"/"+string(ka))
			if err != nil {
				return 0, err
			}
			n += m
		} else {
			n++
		}
		ka, va = ca.Next()
		kb, vb = cb.Next()
	}
	return n, nil
}
