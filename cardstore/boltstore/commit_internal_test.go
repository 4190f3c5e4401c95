package boltstore

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommitIsolatesFailures drives the committer directly with one
// transaction's worth of requests: a request that fails before writing, one
// that fails after writing (dirty) and one that panics after writing must
// each fail alone, leave nothing behind, and not disturb the others.
func TestCommitIsolatesFailures(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "cards.db"), WithGroupCommit(false))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put := func(key string) applyFunc {
		return func(b *buckets) error { return b.claims.Put([]byte(key), []byte("v")) }
	}
	errCheck := errors.New("check failed")
	errWrite := errors.New("write failed")
	reqs := []applyFunc{
		put("ok-1"),
		func(b *buckets) error { return errCheck },
		func(b *buckets) error {
			if err := b.claims.Put([]byte("partial-dirty"), []byte("v")); err != nil {
				return dirty(err)
			}
			return dirty(errWrite)
		},
		put("ok-2"),
		func(b *buckets) error {
			_ = b.claims.Put([]byte("partial-panic"), []byte("v"))
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
	s.commit(append(batch, late, abandoned))

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
	select {
	case err := <-abandoned.done:
		t.Errorf("abandoned request got a reply: %v", err)
	default:
	}
	err = s.view(func(b *buckets) error {
		for _, k := range []string{"ok-1", "ok-2", "ok-3"} {
			if b.claims.Get([]byte(k)) == nil {
				t.Errorf("%s was not written", k)
			}
		}
		for _, k := range []string{"partial-dirty", "partial-panic", "canceled", "abandoned"} {
			if b.claims.Get([]byte(k)) != nil {
				t.Errorf("%s was written", k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
