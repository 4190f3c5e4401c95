package boltfile_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/internal/boltfile"
)

// TestOpenLocked: a second open of a held file fails with ErrLocked after
// the timeout, saying what to check.
func TestOpenLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := boltfile.Open(path, boltfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = boltfile.Open(path, boltfile.Options{Timeout: 50 * time.Millisecond})
	if !errors.Is(err, boltfile.ErrLocked) || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	if _, err := boltfile.Open(path, boltfile.Options{Timeout: -1}); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("negative timeout: %v, want an error naming it", err)
	}
}

// TestSchema covers every path of the schema check.
func TestSchema(t *testing.T) {
	v2 := &boltfile.Schema{Kind: "test", Version: "2", Buckets: [][]byte{[]byte("a"), []byte("b")},
		Upgrades: map[string]func(*bolt.Tx) error{"1": func(tx *bolt.Tx) error {
			if tx.Bucket([]byte("a")) == nil {
				return errors.New("version 1 file lacks bucket a")
			}
			return tx.Bucket([]byte("a")).Put([]byte("upgraded"), []byte("yes"))
		}}}
	write := func(t *testing.T, path, version string, buckets ...string) {
		t.Helper()
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		err = db.Update(func(tx *bolt.Tx) error {
			for _, b := range buckets {
				if _, err := tx.CreateBucket([]byte(b)); err != nil {
					return err
				}
			}
			if version != "" {
				m, err := tx.CreateBucket(boltfile.MetaBucket)
				if err != nil {
					return err
				}
				return m.Put(boltfile.VersionKey, []byte(version))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		version string
		buckets []string
		adopt   bool
		wantErr string // "" means success
	}{
		{name: "fresh"},
		{name: "current", version: "2", buckets: []string{"a", "b"}},
		{name: "upgrade", version: "1", buckets: []string{"a"}},
		{name: "upgrade fails", version: "1", buckets: []string{"x"}, wantErr: "lacks bucket a"},
		{name: "newer", version: "3", buckets: []string{"a", "b"}, wantErr: `schema version "3", this build reads "2" (and upgrades ["1"])`},
		{name: "missing bucket", version: "2", buckets: []string{"a"}, wantErr: `lacks bucket "b"`},
		{name: "foreign", buckets: []string{"x"}, wantErr: "not a test file"},
		{name: "adopt", buckets: []string{"a"}, adopt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.db")
			if tc.version != "" || len(tc.buckets) > 0 {
				write(t, path, tc.version, tc.buckets...)
			}
			s := *v2
			s.Adopt = tc.adopt
			db, err := boltfile.Open(path, boltfile.Options{Schema: &s})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("open: %v, want an error containing %q", err, tc.wantErr)
				}
				if tc.name != "upgrade fails" && !errors.Is(err, boltfile.ErrSchemaVersion) {
					t.Fatalf("open: %v, want ErrSchemaVersion", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			err = db.View(func(tx *bolt.Tx) error {
				if v := string(tx.Bucket(boltfile.MetaBucket).Get(boltfile.VersionKey)); v != "2" {
					t.Errorf("version %q after open, want 2", v)
				}
				if tx.Bucket([]byte("a")) == nil || tx.Bucket([]byte("b")) == nil {
					t.Error("buckets missing after open")
				}
				if tc.name == "upgrade" && tx.Bucket([]byte("a")).Get([]byte("upgraded")) == nil {
					t.Error("upgrade did not run")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSharedFile: two kinds in one file, each with its own version key; a
// kind is added to a file that lacks it, checked on the next open, and
// refused when its buckets are there without its version.
func TestSharedFile(t *testing.T) {
	first := &boltfile.Schema{Kind: "first", Version: "2", Buckets: [][]byte{[]byte("a")}}
	second := &boltfile.Schema{Kind: "second", Version: "1", Key: []byte("second_version"), Buckets: [][]byte{[]byte("meta"), []byte("b")}}
	path := filepath.Join(t.TempDir(), "node.db")
	for round := range 2 { // created, then checked
		db, err := boltfile.Open(path, boltfile.Options{Schema: first})
		if err != nil {
			t.Fatal(err)
		}
		if err := boltfile.Init(db, second); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		err = db.View(func(tx *bolt.Tx) error {
			m := tx.Bucket(boltfile.MetaBucket)
			if got := string(m.Get(boltfile.VersionKey)); got != "2" {
				t.Errorf("first kind's version = %q", got)
			}
			if got := string(m.Get([]byte("second_version"))); got != "1" {
				t.Errorf("second kind's version = %q", got)
			}
			if tx.Bucket([]byte("b")) == nil {
				t.Error("second kind's bucket missing")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := boltfile.Init(db, &boltfile.Schema{Kind: "second", Version: "9", Key: []byte("second_version")}); !errors.Is(err, boltfile.ErrSchemaVersion) {
			t.Fatalf("another version of the second kind: %v, want ErrSchemaVersion", err)
		}
		db.Close()
	}

	// A kind's buckets without its version: refused, naming the bucket.
	path = filepath.Join(t.TempDir(), "odd.db")
	db, err := boltfile.Open(path, boltfile.Options{Schema: first})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("b")); return err }); err != nil {
		t.Fatal(err)
	}
	if err := boltfile.Init(db, second); !errors.Is(err, boltfile.ErrSchemaVersion) || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("buckets without version: %v, want ErrSchemaVersion naming bucket b", err)
	}
	for _, bad := range []*boltfile.Schema{
		{Kind: "x", Version: "1", Key: boltfile.VersionKey},
		{Kind: "x", Version: "1", Key: []byte{}},
		{Kind: "", Version: "1"},
	} {
		if err := boltfile.Init(db, bad); err == nil {
			t.Errorf("Init(%+v) = nil, want an error", bad)
		}
	}
}

// TestSharedFileEitherOrder: the kind with its own key may come first;
// the kind under VersionKey is added after it.
func TestSharedFileEitherOrder(t *testing.T) {
	first := &boltfile.Schema{Kind: "first", Version: "2", Buckets: [][]byte{[]byte("a")}}
	second := &boltfile.Schema{Kind: "second", Version: "1", Key: []byte("second_version"), Buckets: [][]byte{[]byte("b")}}
	path := filepath.Join(t.TempDir(), "node.db")
	for range 2 {
		db, err := boltfile.Open(path, boltfile.Options{Schema: second})
		if err != nil {
			t.Fatal(err)
		}
		if err := boltfile.Init(db, first); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	db, err := boltfile.Open(path, boltfile.Options{Schema: first})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
}
