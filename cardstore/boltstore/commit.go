package boltstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/utpmesh/utpmesh/cardstore"
)

// Limits on one group-commit transaction. The first queued request is
// always taken, whatever its size.
const (
	// maxTxRequests is the most write requests one transaction carries.
	maxTxRequests = 256
	// maxTxBytes stops adding requests once their payload reaches it, so
	// one transaction does not grow without bound under a flood of large
	// puts.
	maxTxBytes = 16 << 20
)

// applyFunc performs one write request inside a shared transaction.
//
// It must check everything that can fail before it writes anything: an
// error it returns before its first write (a conflict, a held claim) fails
// only this request and leaves the transaction clean. An error after its
// first write must be wrapped with dirty, so the committer throws the
// transaction away and runs the other requests again without this one. It
// may run more than once (after such a retry), so it sets its outputs anew
// on every run.
type applyFunc func(b *buckets) error

// writeFailure marks an error that happened after a request started
// writing: its transaction holds partial writes.
type writeFailure struct{ err error }

func (w *writeFailure) Error() string { return w.err.Error() }
func (w *writeFailure) Unwrap() error { return w.err }

// dirty marks err as a failure after writing began.
func dirty(err error) error { return &writeFailure{err} }

// Request states: a queued request is either started by the committer or
// abandoned by its caller, whichever comes first.
const (
	stateQueued int32 = iota
	stateStarted
	stateAbandoned
)

// request is one write call waiting for the committer.
type request struct {
	ctx   context.Context
	apply applyFunc
	size  int
	state atomic.Int32
	done  chan error // buffered: the committer never blocks on it
}

// write runs apply as one durable write: with group commit it joins the
// next shared transaction, otherwise it runs a transaction of its own. It
// returns when the transaction has been committed and fsync'd, or with
// ctx.Err() if ctx ended before the request started.
func (s *Store) write(ctx context.Context, size int, apply applyFunc) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return cardstore.ErrClosed
	}
	s.inflight.Add(1)
	defer s.inflight.Done()
	if !s.cfg.groupCommit {
		s.mu.Unlock()
		return s.writeAlone(ctx, apply)
	}
	r := &request{ctx: ctx, apply: apply, size: size, done: make(chan error, 1)}
	if !s.busy {
		// Idle: commit this request at once, in the caller's goroutine, so
		// a lone writer pays no goroutine hand-off. Requests arriving
		// meanwhile queue up for the committer goroutine.
		s.busy = true
		s.mu.Unlock()
		s.commit([]*request{r})
		s.mu.Lock()
		if len(s.queue) > 0 {
			s.kickCommitter() // busy stays true: the committer drains the queue
		} else {
			s.busy = false
		}
		s.mu.Unlock()
		return <-r.done
	}
	s.queue = append(s.queue, r)
	s.mu.Unlock()

	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		if r.state.CompareAndSwap(stateQueued, stateAbandoned) {
			return ctx.Err() // the committer will skip it
		}
		return <-r.done // already in a transaction: it completes
	}
}

// kickCommitter wakes the committer goroutine; s.mu is held. A kick that
// finds one already pending is dropped: the committer will run anyway.
func (s *Store) kickCommitter() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// writeAlone is write without group commit: one bbolt transaction (and
// fsync) per call. bbolt serialises the transactions.
func (s *Store) writeAlone(ctx context.Context, apply applyFunc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var reqErr error
	start := time.Now()
	err := s.db.Update(func(tx *bolt.Tx) error {
		reqErr = s.runApply(apply, tx)
		return reqErr
	})
	if err == nil && s.cfg.observer != nil {
		s.cfg.observer.Committed(1, time.Since(start))
	}
	if reqErr != nil {
		var wf *writeFailure
		if errors.As(reqErr, &wf) {
			return wf.err
		}
		return reqErr
	}
	if err != nil {
		s.cfg.logger.Error("boltstore: commit failed", "path", s.path, "err", err)
		return fmt.Errorf("boltstore: commit: %w", err)
	}
	return nil
}

// runApply runs apply in tx and turns a panic into a write failure, so a
// bug in one request cannot take the process (or the other requests of the
// transaction) down with it.
func (s *Store) runApply(apply applyFunc, tx *bolt.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.cfg.logger.Error("boltstore: internal error in write request", "path", s.path, "panic", p)
			err = dirty(fmt.Errorf("boltstore: internal error: %v", p))
		}
	}()
	b, err := openBuckets(tx)
	if err != nil {
		return err
	}
	return apply(b)
}

// runCommitter is the group-commit goroutine. A writer that finds the
// store idle commits its own request; requests that arrive while that (or
// any) commit is in flight queue up, and this goroutine, once kicked,
// commits them — each transaction takes everything queued (up to
// maxTxRequests / maxTxBytes) — until the queue is empty and the store is
// idle again. It returns when Close closes the kick channel.
func (s *Store) runCommitter() {
	defer close(s.committerDone)
	for range s.kick {
		for {
			s.mu.Lock()
			if len(s.queue) == 0 {
				s.busy = false
				s.mu.Unlock()
				break
			}
			batch := s.takeBatch()
			s.mu.Unlock()
			s.commit(batch)
		}
	}
}

// takeBatch removes the next transaction's requests from the queue; s.mu
// is held and the queue is not empty. The first request is always taken.
func (s *Store) takeBatch() []*request {
	n, size := 0, 0
	for n < len(s.queue) && n < maxTxRequests && (n == 0 || size < maxTxBytes) {
		size += s.queue[n].size
		n++
	}
	batch := s.queue[:n:n]
	if n == len(s.queue) {
		s.queue = nil
	} else {
		s.queue = append([]*request(nil), s.queue[n:]...)
	}
	return batch
}

// commit runs the requests of batch in one transaction and reports to each
// once it is durable.
func (s *Store) commit(batch []*request) {
	live := make([]*request, 0, len(batch))
	for _, r := range batch {
		if !r.state.CompareAndSwap(stateQueued, stateStarted) {
			continue // its caller gave up; nobody waits for it
		}
		if err := r.ctx.Err(); err != nil {
			r.done <- err
			continue
		}
		live = append(live, r)
	}
	errs := make([]error, len(live))
	for len(live) > 0 {
		bad := -1
		start := time.Now()
		err := s.db.Update(func(tx *bolt.Tx) error {
			for i, r := range live {
				err := s.runApply(r.apply, tx)
				var wf *writeFailure
				if errors.As(err, &wf) {
					bad, errs[i] = i, wf.err
					return err // roll back: the transaction holds part of r
				}
				errs[i] = err
			}
			return nil
		})
		if bad >= 0 {
			// Fail the request that broke the transaction alone and run
			// the others again in a fresh one.
			live[bad].done <- errs[bad]
			live = append(live[:bad], live[bad+1:]...)
			errs = errs[:len(live)]
			continue
		}
		if err != nil {
			s.cfg.logger.Error("boltstore: commit failed", "path", s.path, "requests", len(live), "err", err)
			if errors.Is(err, berrors.ErrDatabaseNotOpen) {
				err = fmt.Errorf("%w: %w", cardstore.ErrClosed, err)
			} else {
				err = fmt.Errorf("boltstore: commit of %d write requests: %w", len(live), err)
			}
			for _, r := range live {
				r.done <- err
			}
			return
		}
		if s.cfg.observer != nil {
			s.cfg.observer.Committed(len(live), time.Since(start))
		}
		if s.cfg.logger.Enabled(context.Background(), slog.LevelDebug) {
			s.cfg.logger.Debug("boltstore: committed", "requests", len(live))
		}
		for i, r := range live {
			r.done <- errs[i]
		}
		return
	}
}
