package boltreg_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/registry/boltreg"
	"github.com/utpmesh/utpmesh/pkg/registry/registrytest"
	bolt "go.etcd.io/bbolt"
)

// checkFile reopens the closed file with plain bbolt and runs tx.Check.
func checkFile(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatalf("reopen for check: %v", err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		var first error
		for err := range tx.Check() {
			if first == nil {
				first = err
			}
		}
		return first
	})
	if err != nil {
		t.Errorf("bbolt consistency check: %v", err)
	}
}

func TestConformance(t *testing.T) {
	registrytest.Run(t, func(t *testing.T) registry.Registry {
		path := filepath.Join(t.TempDir(), "sub", "registry.db")
		s, err := boltreg.Open(path)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Check(); err != nil {
				t.Errorf("Check: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			checkFile(t, path)
		})
		return s
	})
}

func TestRestartPersistence(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "registry.db")
	now := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.FixedZone("X", 3600))
	s, err := boltreg.Open(path, boltreg.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	put, err := s.Put(ctx, registrytest.NewEntry("proj", "echo"))
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if !put.UpdatedAt.Equal(now) || put.UpdatedAt.Location() != time.UTC {
		t.Errorf("updated_at = %v, want %v in UTC", put.UpdatedAt, now)
	}
	if _, err := s.Put(ctx, registrytest.NewEntry("proj", "gone")); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if err := s.Delete(ctx, "proj", "gone"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Get(ctx, "proj", "echo"); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Get after Close: err = %v, want ErrClosed", err)
	}
	if _, err := s.List(ctx, "proj"); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("List after Close: err = %v, want ErrClosed", err)
	}
	if _, err := s.Put(ctx, registrytest.NewEntry("proj", "x")); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Put after Close: err = %v, want ErrClosed", err)
	}
	checkFile(t, path)

	s2, err := boltreg.Open(path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s2.Close()
	got, err := s2.Get(ctx, "proj", "echo")
	if err != nil {
		t.Fatalf("Get after restart: %v", err)
	}
	if !registrytest.Equal(got, put) {
		t.Errorf("after restart Get = %+v, want %+v", got, put)
	}
	if list, err := s2.List(ctx, "proj"); err != nil || len(list) != 1 {
		t.Errorf("List after restart = %d entries, %v; want 1", len(list), err)
	}
}

func TestLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	s, err := boltreg.Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	start := time.Now()
	_, err = boltreg.Open(path, boltreg.WithTimeout(100*time.Millisecond))
	if !errors.Is(err, boltreg.ErrLocked) || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second Open: err = %v, want ErrLocked", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("second Open took %v", d)
	}
}

func TestSchemaVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("meta"))
		if err != nil {
			return err
		}
		return b.Put([]byte("schema_version"), []byte("99"))
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := boltreg.Open(path); err == nil || !strings.Contains(err.Error(), "schema version") {
		t.Fatalf("Open with schema version 99: err = %v", err)
	}
}

func TestCorruptEntry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	s, err := boltreg.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("tools")).Put([]byte("proj\x00bad"), []byte("{not json"))
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err = boltreg.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Get(context.Background(), "proj", "bad"); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("Get corrupt entry: err = %v", err)
	}
	if _, err := s.List(context.Background(), "proj"); err == nil {
		t.Errorf("List with corrupt entry: no error")
	}
}

func TestOpenBadPath(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := boltreg.Open(filepath.Join(f, "registry.db")); err == nil {
		t.Fatal("Open under a regular file: no error")
	}
}
