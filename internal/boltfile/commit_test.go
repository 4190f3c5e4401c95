package boltfile_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/internal/boltfile"
)

var bucket = []byte("t")

// commits records every commit's group size.
type commits struct {
	mu    sync.Mutex
	sizes []int
}

func (c *commits) Committed(n int, _ time.Duration) {
	c.mu.Lock()
	c.sizes = append(c.sizes, n)
	c.mu.Unlock()
}

func (c *commits) get() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.sizes...)
}

func newCommitter(t *testing.T, cfg boltfile.CommitConfig) (*bolt.DB, *boltfile.Committer, *commits) {
	t.Helper()
	db, err := boltfile.Open(filepath.Join(t.TempDir(), "t.db"), boltfile.Options{Schema: &boltfile.Schema{Kind: "test", Version: "1", Buckets: [][]byte{bucket}}})
	if err != nil {
		t.Fatal(err)
	}
	obs := &commits{}
	cfg.Observer = obs
	c := boltfile.NewCommitter(db, cfg)
	t.Cleanup(func() { c.Close(); _ = db.Close() })
	return db, c, obs
}

func put(k string) boltfile.ApplyFunc {
	return func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put([]byte(k), []byte("v")) }
}

func has(t *testing.T, db *bolt.DB, k string) bool {
	t.Helper()
	var ok bool
	if err := db.View(func(tx *bolt.Tx) error { ok = tx.Bucket(bucket).Get([]byte(k)) != nil; return nil }); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestLaterRidesWithNextWrite: a Later write does not commit on its own
// while a Write follows within LaterDelay; both share one transaction, and
// the Later's callback runs only after that commit.
func TestLaterRidesWithNextWrite(t *testing.T) {
	db, c, obs := newCommitter(t, boltfile.CommitConfig{LaterDelay: time.Hour})
	done := make(chan error, 1)
	c.Later(1, put("later"), func(err error) { done <- err })
	select {
	case err := <-done:
		t.Fatalf("Later committed alone (err %v); want it to wait for the next Write", err)
	default:
	}
	if err := c.Write(context.Background(), 1, put("write")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Later: %v", err)
	}
	if got := obs.get(); len(got) != 1 || got[0] != 2 {
		t.Fatalf("commits %v, want one transaction of 2 requests", got)
	}
	if !has(t, db, "later") || !has(t, db, "write") {
		t.Fatal("a write is missing")
	}
}

// TestLaterAloneCommits: a Later write with no company commits by itself
// (after LaterDelay), and Close commits one still waiting.
func TestLaterAloneCommits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
		close bool
	}{
		{"timer", time.Millisecond, false},
		{"close", time.Hour, true},
		{"alone-mode", time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, c, _ := newCommitter(t, boltfile.CommitConfig{LaterDelay: tc.delay, Alone: tc.name == "alone-mode"})
			done := make(chan error, 1)
			c.Later(1, put("later"), func(err error) { done <- err })
			if tc.close {
				c.Close()
			}
			if err := <-done; err != nil {
				t.Fatalf("Later: %v", err)
			}
			if !has(t, db, "later") {
				t.Fatal("the Later write is not in the file")
			}
		})
	}
}

// TestClosedRefuses: after Close, Write, WriteSoon and Later fail with ErrClosed.
func TestClosedRefuses(t *testing.T) {
	_, c, _ := newCommitter(t, boltfile.CommitConfig{})
	c.Close()
	if err := c.Write(context.Background(), 1, put("x")); !errors.Is(err, boltfile.ErrClosed) {
		t.Fatalf("Write after Close: %v, want ErrClosed", err)
	}
	if err := c.WriteSoon(context.Background(), 1, time.Second, put("x")); !errors.Is(err, boltfile.ErrClosed) {
		t.Fatalf("WriteSoon after Close: %v, want ErrClosed", err)
	}
	done := make(chan error, 1)
	c.Later(1, put("y"), func(err error) { done <- err })
	if err := <-done; !errors.Is(err, boltfile.ErrClosed) {
		t.Fatalf("Later after Close: %v, want ErrClosed", err)
	}
}

// TestConcurrentWritesShareCommits: many concurrent writers and Later
// writes all land, in fewer transactions than requests.
func TestConcurrentWritesShareCommits(t *testing.T) {
	db, c, obs := newCommitter(t, boltfile.CommitConfig{})
	const n = 64
	var wg sync.WaitGroup
	laters := make(chan error, n)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := c.Write(context.Background(), 1, put(fmt.Sprint("w", i))); err != nil {
				t.Error(err)
			}
			c.Later(1, put(fmt.Sprint("l", i)), func(err error) { laters <- err })
		}()
	}
	close(start)
	wg.Wait()
	for i := 0; i < n; i++ {
		if err := <-laters; err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if !has(t, db, fmt.Sprint("w", i)) || !has(t, db, fmt.Sprint("l", i)) {
			t.Fatalf("write %d missing", i)
		}
	}
	total := 0
	for _, s := range obs.get() {
		total += s
	}
	if total != 2*n {
		t.Fatalf("commits carried %d requests, want %d", total, 2*n)
	}
}

// waitFor polls cond until it holds; the bound only keeps a broken
// committer from hanging the test.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestWriteSoonRidesWithNextWrite: a WriteSoon waits for company, commits
// in the next Write's transaction (applied before it), and returns only
// once that transaction is durable.
func TestWriteSoonRidesWithNextWrite(t *testing.T) {
	db, c, obs := newCommitter(t, boltfile.CommitConfig{})
	var order []string
	rec := func(k string) boltfile.ApplyFunc {
		return func(tx *bolt.Tx) error { order = append(order, k); return put(k)(tx) }
	}
	soon := make(chan error, 1)
	go func() { soon <- c.WriteSoon(context.Background(), 1, time.Hour, rec("soon")) }()
	waitFor(t, "the WriteSoon to queue", func() bool { return c.Waiting() == 1 })
	select {
	case err := <-soon:
		t.Fatalf("WriteSoon returned (%v) before any commit", err)
	default:
	}
	if err := c.Write(context.Background(), 1, rec("write")); err != nil {
		t.Fatal(err)
	}
	if err := <-soon; err != nil {
		t.Fatalf("WriteSoon: %v", err)
	}
	if got := obs.get(); len(got) != 1 || got[0] != 2 {
		t.Fatalf("commits %v, want one transaction of 2 requests", got)
	}
	if fmt.Sprint(order) != "[soon write]" || !has(t, db, "soon") || !has(t, db, "write") {
		t.Fatalf("applied %v, want [soon write], both stored", order)
	}
}

// TestWriteSoonAlone: a WriteSoon with no company commits by itself once
// its delay has passed, even when a Later with a longer delay waits (it
// rides along); Close commits one still waiting; a zero delay is Write.
func TestWriteSoonAlone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
		close bool
	}{
		{"delay", time.Millisecond, false},
		{"zero-delay", 0, false},
		{"close", time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, c, obs := newCommitter(t, boltfile.CommitConfig{LaterDelay: time.Hour})
			later := make(chan error, 1)
			c.Later(1, put("later"), func(err error) { later <- err })
			soon := make(chan error, 1)
			go func() { soon <- c.WriteSoon(context.Background(), 1, tc.delay, put("soon")) }()
			if tc.close {
				waitFor(t, "the WriteSoon to queue", func() bool { return c.Waiting() == 2 })
				c.Close()
			}
			if err := <-soon; err != nil {
				t.Fatalf("WriteSoon: %v", err)
			}
			if err := <-later; err != nil {
				t.Fatalf("Later: %v", err)
			}
			if got := obs.get(); len(got) != 1 || got[0] != 2 {
				t.Fatalf("commits %v, want one transaction of 2 requests", got)
			}
			if !has(t, db, "soon") || !has(t, db, "later") {
				t.Fatal("a write is missing")
			}
		})
	}
}

// TestWriteSoonCanceled: a WriteSoon whose context ends while it waits
// returns the context's error and is not written by the next commit.
func TestWriteSoonCanceled(t *testing.T) {
	db, c, _ := newCommitter(t, boltfile.CommitConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	soon := make(chan error, 1)
	go func() { soon <- c.WriteSoon(ctx, 1, time.Hour, put("soon")) }()
	waitFor(t, "the WriteSoon to queue", func() bool { return c.Waiting() == 1 })
	cancel()
	if err := <-soon; !errors.Is(err, context.Canceled) {
		t.Fatalf("WriteSoon: %v, want context.Canceled", err)
	}
	if err := c.Write(context.Background(), 1, put("write")); err != nil {
		t.Fatal(err)
	}
	if has(t, db, "soon") || !has(t, db, "write") {
		t.Fatal("the canceled WriteSoon was written, or the Write was not")
	}
}
