package boltstore

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// DefaultLockDelay is the default lock-delay (WithLockDelay): the lease
// pkg/worker's runtime takes on every call (its DefaultClaimLease, 5 s),
// so a worker's claims are kept in memory by default. (boltstore does not
// import pkg/worker; the two constants are kept equal by hand.)
const DefaultLockDelay = 5 * time.Second

// RestartedHolder is the Holder of the *cardstore.ClaimHeldError that
// refuses a claim during the lock-delay after a restart (see "Call
// claims" in the package documentation).
const RestartedHolder = "(store restarted)"

// Meta bucket keys of the boot epoch: the number of the current Open of
// the file, and the number of the last one whose Close wrote every claim.
// metaLockDelay keeps the lock-delay (nanoseconds) of the current run:
// the next Open waits out the longer of its own and this one, since the
// claims this run keeps in memory have leases up to it.
var (
	metaBootEpoch   = []byte("boot_epoch")
	metaClosedEpoch = []byte("closed_epoch")
	metaLockDelay   = []byte("lock_delay")
)

// WithLockDelay sets the lock-delay (default DefaultLockDelay). Claims on
// call keys (cardstore.CallKey) with a lease up to d are kept in the
// store's memory and written with the next commit instead of a commit of
// their own; after a restart that may have lost such claims, calls born
// before it may not be claimed by a new holder for the longer of d and the
// previous run's lock-delay. d = 0 keeps every claim durable at once, as
// before issue 27 (a restart after a run with a lock-delay still waits out
// that run's). d must be between 0 and cardstore.MaxLease.
func WithLockDelay(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 || d > cardstore.MaxLease {
			return fmt.Errorf("%w: WithLockDelay(%v): must be between 0 (every claim durable at once) and %v", cardstore.ErrInvalid, d, cardstore.MaxLease)
		}
		c.lockDelay = d
		return nil
	}
}

// bootState is what Open learns about the previous run of the file.
type bootState struct {
	// epoch numbers this Open of the file (1 for a new file).
	epoch uint64
	// unclean: the previous run did not close with every claim written,
	// so claims it kept in memory may be lost.
	unclean bool
	// seq is the turns index's sequence at Open: a card written since has
	// a larger one.
	seq uint64
	// at is the store clock at Open; delayUntil ends the lock-delay (zero
	// when there is none).
	at, delayUntil time.Time
	// delay is the lock-delay after this Open: the longer of this run's
	// and the previous run's.
	delay time.Duration
}

// boot counts this Open in the meta bucket, in one transaction, and
// learns whether the previous run closed with every claim written.
func (s *Store) boot() error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		meta, turns := tx.Bucket(bucketMeta), tx.Bucket(bucketTurnRecs)
		if meta == nil || turns == nil {
			return fmt.Errorf("%w: the meta or turnrecs bucket is missing", ErrSchemaVersion)
		}
		prev, err := metaUint(meta, metaBootEpoch)
		if err != nil {
			return err
		}
		closed, err := metaUint(meta, metaClosedEpoch)
		if err != nil {
			return err
		}
		prevDelay, err := metaUint(meta, metaLockDelay)
		if err != nil {
			return err
		}
		s.boots.delay = max(s.cfg.lockDelay, time.Duration(min(prevDelay, uint64(cardstore.MaxLease))))
		s.boots.epoch = prev + 1
		// A file without a boot epoch was last written by a build that
		// kept every claim durable: nothing can be lost.
		s.boots.unclean = prev > 0 && closed != prev
		s.boots.seq = turns.Sequence()
		if err := meta.Put(metaLockDelay, []byte(strconv.FormatInt(int64(s.cfg.lockDelay), 10))); err != nil {
			return err
		}
		return meta.Put(metaBootEpoch, []byte(strconv.FormatUint(s.boots.epoch, 10)))
	})
	if err != nil {
		return fmt.Errorf("boltstore: count the boot of %s: %w", s.path, err)
	}
	s.boots.at = s.cfg.clock().UTC()
	if s.boots.unclean && s.boots.delay > 0 {
		s.boots.delayUntil = s.boots.at.Add(s.boots.delay)
		s.cfg.logger.Warn("boltstore: the previous run did not close cleanly; calls born before this boot wait out the lock-delay before a new holder may claim them",
			"path", s.path, "boot_epoch", s.boots.epoch, "lock_delay", s.boots.delay, "until", s.boots.delayUntil)
	} else {
		s.cfg.logger.Info("boltstore: opened", "path", s.path, "boot_epoch", s.boots.epoch)
	}
	return nil
}

// metaUint reads a decimal counter of the meta bucket (0 when absent).
func metaUint(meta *bolt.Bucket, key []byte) (uint64, error) {
	v := meta.Get(key)
	if v == nil {
		return 0, nil
	}
	n, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: meta %s is %q, not a number", ErrSchemaVersion, key, v)
	}
	return n, nil
}

// markClean records, after the committer has drained, that this run
// closes with every claim written (so the next Open needs no
// lock-delay). It writes nothing when a claim is still only in memory.
func (s *Store) markClean() error {
	if n := s.mem.dirtyCount(); n > 0 {
		s.cfg.logger.Error("boltstore: closing with claims that are only in memory; the next open waits out the lock-delay",
			"path", s.path, "claims", n)
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return fmt.Errorf("%w: the meta bucket is missing", ErrSchemaVersion)
		}
		return meta.Put(metaClosedEpoch, []byte(strconv.FormatUint(s.boots.epoch, 10)))
	})
}

// BootEpoch returns the number of this Open of the file: 1 for a new
// file, one more on every Open. Claim records written by this run carry
// it (cardstore.ClaimRecord.Epoch).
func (s *Store) BootEpoch() uint64 { return s.boots.epoch }

// LockDelayUntil returns when the lock-delay after this Open ends (store
// clock), or the zero time when there is none: the previous run closed
// cleanly, the file is new, or WithLockDelay(0).
func (s *Store) LockDelayUntil() time.Time { return s.boots.delayUntil }

// checkLockDelay applies the lock-delay to the claim c that req's holder
// would get on the call k, whose current record is rec, at the store's
// time now. During the lock-delay, a call born before this boot, whose
// record was not written by this run, may only be renewed by the holder
// its record names while that lease runs: any other grant (a first
// claim, a claim after a tombstone, a take-over, a renewal of a lapsed
// lease) could hand the call to a second worker while the holder of a
// claim the crash lost still runs it. The refusal is a
// *cardstore.ClaimHeldError whose holder is RestartedHolder and whose
// expiry is the end of the lock-delay.
func (s *Store) checkLockDelay(ctx context.Context, projectID string, k cardstore.CallKey, rec *claimRecord, holder string, now time.Time) error {
	if s.boots.delayUntil.IsZero() || !now.Before(s.boots.delayUntil) {
		return nil
	}
	if rec != nil && rec.Epoch == s.boots.epoch {
		return nil // decided by this run
	}
	if rec.Live() && rec.Holder == holder && now.Before(rec.ExpiresAt) {
		return nil // the durable holder renews its running lease
	}
	born, err := s.bornAfterBoot(ctx, projectID, k)
	if err != nil || born {
		return err
	}
	return fmt.Errorf("%w: key %q in project %s: the call was born before the store restarted, and a claim on it may have been lost with the store's memory",
		&cardstore.ClaimHeldError{Holder: RestartedHolder, ExpiresAt: s.boots.delayUntil}, k.String(), projectID)
}

// bornAfterBoot reports whether the call came to this store after Open:
// its first tool.call card was written since (its turns index sequence is
// past the one Open saw). A call with no tool.call card has no durable
// birth to compare and counts as born (the mesh writes every call's card
// before its command; only hand-made claims have none).
func (s *Store) bornAfterBoot(ctx context.Context, projectID string, k cardstore.CallKey) (bool, error) {
	_, seq, err := s.findToolCall(ctx, projectID, k.AgentTurnID, k.ToolCallID)
	if err != nil {
		return false, err
	}
	return seq == 0 || seq > s.boots.seq, nil
}

// findToolCall returns the first tool.call card of the call and its turns
// index sequence, or (nil, 0, nil) when there is none. It reads the
// turn's cards oldest first, up to the call's first card, and checks ctx
// between cards.
func (s *Store) findToolCall(ctx context.Context, projectID, agentTurnID, toolCallID string) (*card.Card, uint64, error) {
	prefix := turnPrefix(projectID, agentTurnID)
	var found *card.Card
	var seq uint64
	err := s.view(func(b *buckets) error {
		cur := b.recs.Cursor()
		for k, v := cur.Seek(turnKey(prefix, 0)); k != nil && bytes.HasPrefix(k, prefix); k, v = cur.Next() {
			if len(k) != len(prefix)+8 {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			data := b.cards.Get(cardKey(projectID, string(v)))
			if ok, err := isCallCard(data, v, toolCallID); err != nil || !ok {
				if err != nil {
					return err
				}
				continue
			}
			c, err := card.Decode(data)
			if err != nil {
				return fmt.Errorf("boltstore: stored card %s is corrupt: %w", v, err)
			}
			found, seq = c, seqOf(k, prefix)
			return nil
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return found, seq, nil
}
