package jskv

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// ErrNoBatch is returned by CreateAll on a bucket whose stream does not
// take atomic batches (Config.Atomic unset, or a server before 2.12).
var ErrNoBatch = errors.New("jskv: the bucket's stream does not take atomic batches")

// MaxInflightBatches bounds the atomic batches one Bucket has open at
// once: nats-server allows 50 per stream by default, shared by every
// process writing the bucket (three nodes of a cluster take 48).
const MaxInflightBatches = 16

// JetStream error codes CreateAll reacts to.
const (
	errCodeWrongLastSeq         = 10071
	errCodeWrongLastSeqConstant = 10164 // replicated streams; a subject another write has in flight
)

// Headers of an atomic batch (ADR-50) and of a create.
const (
	hdrExpectLastSubjSeq = "Nats-Expected-Last-Subject-Sequence"
	hdrBatchID           = "Nats-Batch-Id"
	hdrBatchSeq          = "Nats-Batch-Sequence"
	hdrBatchCommit       = "Nats-Batch-Commit"
)

// Pair is one key and its value.
type Pair struct {
	Key   string
	Value []byte
}

// Atomic reports whether the bucket's stream takes atomic batches, so
// that CreateAll may be used (Config.Atomic, and a server that kept the
// setting).
func (b *Bucket) Atomic() bool { return b.atomic }

// CreateAll creates every key of pairs with its value, all of them or
// none, in one atomic batch: one replicated write instead of one per key.
// Each key must not exist (no message on its subject: a delete marker
// counts as one); when one does, or another write of it is in flight,
// nothing is stored and the error matches jetstream.ErrKeyExists
// (Conflict). Any other error may leave the batch stored or not (an
// acknowledgement lost): the caller reads to find out. A bucket opened
// without atomic batches returns ErrNoBatch. It returns the revision of
// the last pair's key.
func (b *Bucket) CreateAll(ctx context.Context, pairs []Pair) (uint64, error) {
	if !b.atomic {
		return 0, ErrNoBatch
	}
	if len(pairs) == 0 {
		return 0, nil
	}
	select {
	case b.batches <- struct{}{}:
		defer func() { <-b.batches }()
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	rev, err := b.publishBatch(ctx, pairs)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == errCodeWrongLastSeq || apiErr.ErrorCode == errCodeWrongLastSeqConstant) {
		return 0, fmt.Errorf("%w: %w", jetstream.ErrKeyExists, err)
	}
	if err != nil {
		return 0, fmt.Errorf("jskv: create %d keys in one batch: %w", len(pairs), err)
	}
	return rev, nil
}

// publishBatch sends pairs as one atomic batch, every message expecting
// its subject empty, and waits for the commit's acknowledgement, whose
// sequence it returns.
func (b *Bucket) publishBatch(ctx context.Context, pairs []Pair) (uint64, error) {
	id := card.NewID()
	var last *nats.Msg
	for i, p := range pairs {
		m := nats.NewMsg(b.keyPre + p.Key)
		m.Data = p.Value
		m.Header.Set(hdrExpectLastSubjSeq, "0")
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if i == len(pairs)-1 {
			m.Header.Set(hdrBatchCommit, "1")
			last = m
			break
		}
		if err := b.nc.PublishMsg(m); err != nil {
			return 0, err
		}
	}
	// No retries of nats.go's own: a commit sent again without its batch
	// is refused, and the caller decides what a failure means.
	ack, err := b.js.PublishMsg(ctx, last, jetstream.WithRetryAttempts(0))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// allowAtomic turns atomic batches on for the bucket's stream (nats-server
// 2.12 and later) and reports whether the server kept the setting (an
// older server drops it).
func allowAtomic(ctx context.Context, js jetstream.JetStream, stream string) (bool, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return false, fmt.Errorf("jskv: stream %s: %w", stream, err)
	}
	cfg := st.CachedInfo().Config
	if cfg.AllowAtomicPublish {
		return true, nil
	}
	cfg.AllowAtomicPublish = true
	si, err := js.UpdateStream(ctx, cfg)
	if err != nil {
		return false, fmt.Errorf("jskv: allow atomic batches on stream %s: %w", stream, err)
	}
	return si.CachedInfo().Config.AllowAtomicPublish, nil
}
