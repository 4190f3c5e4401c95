package boltfile

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

var testBucket = []byte("t")

// openTest opens a fresh file with one bucket, closed when the test ends.
func openTest(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := Open(filepath.Join(t.TempDir(), "t.db"), Options{Schema: &Schema{Kind: "test", Version: "1", Buckets: [][]byte{testBucket}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestCommitIsolatesFailures drives the committer directly with one
// transaction's worth of requests: a request that fails before writing, one
// that fails after writing (Dirty) and one that panics after writing must
// each fail alone, leave nothing behind, and not disturb the others.
func TestCommitIsolatesFailures(t *testing.T) {
	db := openTest(t)
	c := NewCommitter(db, CommitConfig{Alone: true})
	defer c.Close()
	put := func(key string) ApplyFunc {
		return func(tx *bolt.Tx) error { return tx.Bucket(testBucket).Put([]byte(key), []byte("v")) }
	}
	errCheck := errors.New("check failed")
	errWrite := errors.New("write failed")
	reqs := []ApplyFunc{
		put("ok-1"),
		func(*bolt.Tx) error { return errCheck },
		func(tx *bolt.Tx) error {
			if err := tx.Bucket(testBucket).Put([]byte("partial-dirty"), []byte("v")); err != nil {
				return Dirty(err)
			}
			return Dirty(errWrite)
		},
		put("ok-2"),
		func(tx *bolt.Tx) error {
			_ = tx.Bucket(testBucket).Put([]byte("partial-panic"), []byte("v"))
			panic("boom")
		},
		put("ok-3"),
	}
	batch := make([]*request, len(reqs))
	for i, fn := range reqs {
		batch[i] = &request{ctx: context.Background(), apply: fn, done: make(chan error, 1)}
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	late := &request{ctx: canceled, apply: put("canceled"), done: make(chan error, 1)}
	abandoned := &request{ctx: context.Background(), apply: put("abandoned"), done: make(chan error, 1)}
	abandoned.state.Store(stateAbandoned)
	var laterErr error
	laterCalled := false
	later := &request{ctx: context.Background(), apply: put("later"), later: func(err error) { laterErr, laterCalled = err, true }}
	c.commit(append(batch, late, abandoned, later))

	want := []error{nil, errCheck, errWrite, nil, nil, nil}
	for i, r := range batch {
		err := <-r.done
		switch {
		case i == 4:
			if err == nil || !strings.Contains(err.Error(), "internal error: boom") {
				t.Errorf("panicking request: got %v, want an internal error", err)
			}
		case !errors.Is(err, want[i]) || (want[i] == nil && err != nil):
			t.Errorf("request %d: got %v, want %v", i, err, want[i])
		}
	}
	if err := <-late.done; !errors.Is(err, context.Canceled) {
		t.Errorf("request canceled before start: got %v", err)
	}
	if !laterCalled || laterErr != nil {
		t.Errorf("Later request: called %v with %v, want called with nil", laterCalled, laterErr)
	}
	select {
	case err := <-abandoned.done:
		t.Errorf("abandoned request got a reply: %v", err)
	default:
	}
	err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(testBucket)
		for _, k := range []string{"ok-1", "ok-2", "ok-3", "later"} {
			if b.Get([]byte(k)) == nil {
				t.Errorf("%s was not written", k)
			}
		}
		for _, k := range []string{"partial-dirty", "partial-panic", "canceled", "abandoned"} {
			if b.Get([]byte(k)) != nil {
				t.Errorf("%s was written", k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// blockCommits holds the committer in a transaction until the returned
// release is called, so that writes made meanwhile queue up.
func blockCommits(t *testing.T, c *Committer) (release func()) {
	t.Helper()
	entered, unblock := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.Write(context.Background(), 0, func(*bolt.Tx) error {
			close(entered)
			<-unblock
			return nil
		})
	}()
	<-entered
	return func() {
		close(unblock)
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestQueuedWritesShareOneCommit: writes that arrive while a commit runs
// all go into the next transaction, one fsync for all of them.
func TestQueuedWritesShareOneCommit(t *testing.T) {
	db := openTest(t)
	obs := &sizes{}
	c := NewCommitter(db, CommitConfig{Observer: obs})
	defer c.Close()
	release := blockCommits(t, c)
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() {
			errs <- c.Write(context.Background(), 1, func(tx *bolt.Tx) error {
				return tx.Bucket(testBucket).Put([]byte{byte(i)}, []byte("v"))
			})
		}()
	}
	waitFor(t, func() bool { return c.Queued() == n })
	release()
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := obs.get(); len(got) != 2 || got[0] != 1 || got[1] != n {
		t.Fatalf("commit group sizes %v, want [1 %d]", got, n)
	}
}

type sizes struct {
	mu sync.Mutex
	s  []int
}

func (o *sizes) Committed(n int, _ time.Duration) { o.mu.Lock(); o.s = append(o.s, n); o.mu.Unlock() }
func (o *sizes) get() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int(nil), o.s...)
}

// waitFor polls cond until it holds; the deadline is a failure bound, not
// a timing assertion.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 30s")
		}
		time.Sleep(time.Millisecond)
	}
}
