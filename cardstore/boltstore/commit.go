package boltstore

import (
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/boltfile"
)

// applyFunc performs one write request inside a shared transaction; the
// rules of boltfile.ApplyFunc apply (check before writing, wrap a failure
// after the first write with dirty, set outputs anew on every run).
type applyFunc func(b *buckets) error

// dirty marks err as a failure after writing began.
func dirty(err error) error { return boltfile.Dirty(err) }

// write runs apply as one durable write through the store's committer (see
// internal/boltfile): with group commit it joins the next shared
// transaction. It returns when the transaction has been committed and
// fsync'd, or with ctx.Err() if ctx ended before the request started.
func (s *Store) write(ctx context.Context, size int, apply applyFunc) error {
	return closedErr(s.commits.Write(ctx, size, txApply(apply)))
}

// writeSoon is write for a write that may wait for company up to the
// dispatch linger (WithDispatchLinger, boltfile.Committer.WriteSoon).
func (s *Store) writeSoon(ctx context.Context, size int, apply applyFunc) error {
	return closedErr(s.commits.WriteSoon(ctx, size, s.cfg.linger, txApply(apply)))
}

// txApply runs apply on the store's buckets of the transaction.
func txApply(apply applyFunc) boltfile.ApplyFunc {
	return func(tx *bolt.Tx) error {
		b, err := openBuckets(tx)
		if err != nil {
			return err
		}
		return apply(b)
	}
}

// closedErr makes the committer's ErrClosed the store's.
func closedErr(err error) error {
	if errors.Is(err, boltfile.ErrClosed) {
		return fmt.Errorf("%w: %w", cardstore.ErrClosed, err)
	}
	return err
}

// writeCalls is write for a request that reads or ends call claims: each
// run of apply sees the claim table through b.calls, and writeCalls
// returns the last run's (the committed one's, when err is nil).
func (s *Store) writeCalls(ctx context.Context, size int, apply applyFunc) (*callTx, error) {
	var last *callTx
	err := s.write(ctx, size, func(b *buckets) error {
		last = &callTx{mem: s.mem, epoch: s.boots.epoch}
		b.calls = last
		return apply(b)
	})
	return last, err
}
