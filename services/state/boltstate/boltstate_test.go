package boltstate_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/boltstate"
	"github.com/utpmesh/utpmesh/services/state/statetest"
)

func TestConformance(t *testing.T) {
	statetest.Run(t, func(t *testing.T) (state.Store, state.Store) {
		s, err := boltstate.Open(filepath.Join(t.TempDir(), "atlas-test.db"), 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s, s // one writer per file: both handles are the same
	})
}

// Files written before the state interface existed (a top-level bucket
// "p:<project>" holding one bucket per name) read and write unchanged.
func TestLayoutIsTheOldOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "atlas-tasks.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		p, err := tx.CreateBucketIfNotExists([]byte("p:demo"))
		if err != nil {
			return err
		}
		b, err := p.CreateBucketIfNotExists([]byte("tasks"))
		if err != nil {
			return err
		}
		return b.Put([]byte("task_1"), []byte(`{"title":"old"}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Close()

	s, err := boltstate.Open(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(context.Background(), func(tx state.Tx) error {
		v, found, err := tx.Bucket("demo", "tasks").Get("task_1")
		if err != nil || !found || string(v) != `{"title":"old"}` {
			return fmt.Errorf("old value = %q %v %v", v, found, err)
		}
		return tx.Bucket("demo", "tasks").Put("task_2", []byte(`{"title":"new"}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.DB().View(func(tx *bolt.Tx) error {
		if v := tx.Bucket([]byte("p:demo")).Bucket([]byte("tasks")).Get([]byte("task_2")); string(v) != `{"title":"new"}` {
			return fmt.Errorf("new value in the old layout = %q", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
}
