package boltfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestCompact: a file that held much and now holds little shrinks, keeps
// every key, value, nested bucket and sequence, and passes bbolt's check.
func TestCompact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := Open(path, Options{Schema: &Schema{Kind: "test", Version: "1", Buckets: [][]byte{[]byte("meta"), []byte("data")}}})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 4096)
	if err := db.Update(func(tx *bolt.Tx) error {
		for i := 0; i < 2000; i++ {
			if err := tx.Bucket([]byte("data")).Put([]byte(fmt.Sprintf("k%05d", i)), big); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("data"))
		for i := 0; i < 2000; i += 2 { // half goes
			if err := b.Delete([]byte(fmt.Sprintf("k%05d", i))); err != nil {
				return err
			}
		}
		nb, err := b.CreateBucket([]byte("nested"))
		if err != nil {
			return err
		}
		if _, err := nb.NextSequence(); err != nil {
			return err
		}
		return nb.Put([]byte("a"), []byte("b"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := Compact(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.After >= res.Before/2 || res.Keys != 1000+1+1 { // + nested's key + meta's schema_version
		t.Fatalf("compact: %+v; want the file under half its size and 1002 keys", res)
	}
	if _, err := os.Stat(path + ".compact"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the copy is left behind: %v", err)
	}
	db, err = Open(path, Options{Schema: &Schema{Kind: "test", Version: "1", Buckets: [][]byte{[]byte("meta"), []byte("data")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("data"))
		if v := b.Get([]byte("k00001")); len(v) != 4096 {
			return fmt.Errorf("k00001 lost")
		}
		if v := b.Get([]byte("k00000")); v != nil {
			return fmt.Errorf("k00000 came back")
		}
		if nb := b.Bucket([]byte("nested")); nb == nil || nb.Sequence() != 1 || string(nb.Get([]byte("a"))) != "b" {
			return fmt.Errorf("nested bucket lost")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// An open file is not compacted.
	if _, err := Compact(path, 50*time.Millisecond); !errors.Is(err, ErrLocked) {
		t.Fatalf("compact an open file: %v, want ErrLocked", err)
	}
}
