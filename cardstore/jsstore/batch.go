package jsstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// errCAS reports that a compare-and-set expectation of a write failed: a
// concurrent writer changed one of the records it read. Nothing of the
// write was stored; the caller reads again and retries.
var errCAS = errors.New("jsstore: a record changed since it was read")

// JetStream error codes the store reacts to.
const (
	errCodeNoPeers              = 10005 // no suitable peers for placement (stream create)
	errCodeWrongLastSeq         = 10071
	errCodeWrongLastSeqConstant = 10164 // replicated streams, and atomic batches touching a subject twice
	errCodeMsgTooLarge          = 10054
	errCodeAtomicDisabled       = 10174
	errCodeBatchIncomplete      = 10176
	errCodeBatchTooLarge        = 10199
	errCodeBatchTooManyInflight = 10210
	errCodeExpectNotReady       = 10163 // expected last sequence per subject temporarily unavailable (a new leader)
)

// Headers of the writes.
const (
	hdrExpectLastSubjSeq = "Nats-Expected-Last-Subject-Sequence"
	hdrRollup            = "Nats-Rollup"
	hdrBatchID           = "Nats-Batch-Id"
	hdrBatchSeq          = "Nats-Batch-Sequence"
	hdrBatchCommit       = "Nats-Batch-Commit"
)

// record is one message of a write.
func record(subject string, data []byte) *nats.Msg {
	return &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
}

// expect makes m a compare-and-set: it is stored only if the last message
// on its subject has sequence seq (0: the subject has no message).
func expect(m *nats.Msg, seq uint64) *nats.Msg {
	m.Header.Set(hdrExpectLastSubjSeq, strconv.FormatUint(seq, 10))
	return m
}

// rollup makes m replace every earlier message on its subject.
func rollup(m *nats.Msg) *nats.Msg {
	m.Header.Set(hdrRollup, "sub")
	return m
}

// noRespondersWindow bounds how long a request that no server answered
// is asked again, unless Config.RequestTimeout is longer: a stream just
// created through another server, or one electing a leader (4–9 s,
// nats-server's RAFT election timeout), answers a moment later, but on a
// loaded machine (CI's two cores under -race) that moment has exceeded
// half a second. Nothing was stored by a request nobody took, so
// repeating it is safe.
const noRespondersWindow = 10 * time.Second

// askAgain waits before the next attempt of a request that no server
// answered, and reports false once the window since first is over (the
// caller then returns the error). It returns ctx's error if ctx ends.
func (s *Store) askAgain(ctx context.Context, first time.Time, attempt int) (bool, error) {
	if time.Since(first) >= max(noRespondersWindow, s.cfg.RequestTimeout) {
		return false, nil
	}
	if err := backoff(ctx, attempt); err != nil {
		return false, err
	}
	return true, nil
}

// maxTransient bounds the retries of a write that the server refused for
// a passing reason (too many open batches, a batch cut short).
const maxTransient = 50

// publish stores msgs, all of them or none: one message is a plain
// publish, several are one atomic batch (ADR-50). It returns the sequence
// of the last message. A failed expectation is errCAS.
//
// Each attempt waits Config.AttemptTimeout for its acknowledgement; one
// left unanswered (the stream leader died with it in flight, or its
// acknowledgement was lost) is sent again, within ctx (bounded by
// Config.RequestTimeout when it has no deadline). That is safe because
// every write of the store is guarded by a compare-and-set (a batch holds
// at least one card expected absent): a copy of a write that was stored
// fails its expectation and stores nothing, and nats-server's new leader
// has applied every entry of the lost leader's term before it takes a
// write (it signals leadership only then), so at most one copy is ever
// applied. The write's outcome then is read back (resend.go): a batch's
// caller plans again and finds its cards (commitGroup), a single record
// is compared with what is stored (storedCopy).
func (s *Store) publish(ctx context.Context, msgs []*nats.Msg) (uint64, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	ctx, cancel := s.reqCtx(ctx)
	defer cancel()
	if len(msgs) > 1 {
		select {
		case s.batches <- struct{}{}:
			defer func() { <-s.batches }()
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	first := time.Now()
	unanswered := 0 // attempts sent and never answered: maybe stored
	for attempt := 0; ; attempt++ {
		actx, acancel := deadline.Within(ctx, s.cfg.AttemptTimeout)
		seq, err := s.publishOnce(actx, msgs)
		lost := err != nil && errors.Is(actx.Err(), context.DeadlineExceeded)
		acancel()
		if lost {
			unanswered++
			if ctx.Err() == nil {
				continue // resend at once: the attempt has waited already
			}
			return s.unknownOutcome(ctx, msgs, unanswered, err)
		}
		if noResponders(err) {
			// Nothing stored: the stream's subjects are not known to this
			// server yet (a stream just created through another node, or a
			// leader being elected). Ask again shortly.
			again, werr := s.askAgain(ctx, first, attempt)
			if werr != nil {
				if unanswered > 0 {
					return s.unknownOutcome(ctx, msgs, unanswered, werr)
				}
				return 0, werr
			}
			if again {
				continue
			}
		}
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) {
			if err != nil && unanswered > 0 {
				return s.unknownOutcome(ctx, msgs, unanswered, err)
			}
			return seq, err
		}
		switch apiErr.ErrorCode {
		case errCodeWrongLastSeq, errCodeWrongLastSeqConstant:
			if unanswered > 0 && len(msgs) == 1 {
				// An earlier copy may be what changed the record.
				if seq, ok, rerr := s.storedCopy(ctx, msgs[0]); rerr == nil && ok {
					return seq, nil
				}
			}
			return 0, fmt.Errorf("%w: %w", errCAS, err)
		case errCodeBatchTooLarge:
			return 0, fmt.Errorf("%w: this write needs %d messages in one atomic batch, more than the server allows (%s); write fewer cards at once, or raise jetstream { limits { max_batch_size } } on every nats-server",
				cardstore.ErrTooLarge, len(msgs), apiErr.Description)
		case errCodeMsgTooLarge:
			return 0, fmt.Errorf("%w: a record is larger than the stream's or server's max message size (%s); raise max_payload", cardstore.ErrTooLarge, apiErr.Description)
		case errCodeAtomicDisabled:
			return 0, fmt.Errorf("%w: stream %s refuses atomic batches: %w", ErrUnsupported, s.cfg.Stream, err)
		case errCodeBatchTooManyInflight, errCodeBatchIncomplete, errCodeExpectNotReady:
			if attempt >= maxTransient {
				return 0, fmt.Errorf("jsstore: write to stream %s still refused after %d attempts: %w", s.cfg.Stream, attempt+1, err)
			}
			if err := backoff(ctx, attempt); err != nil {
				if unanswered > 0 {
					return s.unknownOutcome(ctx, msgs, unanswered, err)
				}
				return 0, err
			}
		default:
			return 0, fmt.Errorf("jsstore: write to stream %s: %w", s.cfg.Stream, err)
		}
	}
}

// noResponders reports a write that no server took: core NATS's
// ErrNoResponders from a plain request, or, from a JetStream publish,
// jetstream.ErrNoStreamResponse, which is how nats.go reports no
// responders to a publish (its own retries are turned off: publish does
// them, for as long as noRespondersWindow). It is not a wrapper of
// nats.ErrNoResponders, so both are checked: without the second, a write
// to a stream this server has not learned yet failed ErrUnavailable after
// half a second instead of being asked again.
func noResponders(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// publishOnce makes one attempt of publish, bounded by ctx. A batch
// gets a batch id of its own: a copy of it resent is a new batch.
func (s *Store) publishOnce(ctx context.Context, msgs []*nats.Msg) (uint64, error) {
	if len(msgs) == 1 {
		if s.beforeCommit != nil {
			if err := s.beforeCommit(ctx, msgs); err != nil {
				return 0, err
			}
		}
		ack, err := s.js.PublishMsg(ctx, msgs[0], jetstream.WithRetryAttempts(0))
		if err != nil {
			return 0, s.publishErr(err)
		}
		return s.acked(ctx, msgs, ack.Sequence)
	}
	id := card.NewID() // at most 64 bytes
	for i, m := range msgs {
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if i < len(msgs)-1 {
			m.Header.Del(hdrBatchCommit)
			if err := s.nc.PublishMsg(m); err != nil {
				return 0, s.publishErr(err)
			}
			continue
		}
		m.Header.Set(hdrBatchCommit, "1")
	}
	if s.beforeCommit != nil {
		if err := s.beforeCommit(ctx, msgs); err != nil {
			return 0, err
		}
	}
	ack, err := s.js.PublishMsg(ctx, msgs[len(msgs)-1], jetstream.WithRetryAttempts(0))
	if err != nil {
		return 0, s.publishErr(err)
	}
	return s.acked(ctx, msgs, ack.Sequence)
}

// publishErr keeps API errors as they are (publish classifies them) and
// maps the rest like requestErr.
func (s *Store) publishErr(err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr):
		return err
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return fmt.Errorf("%w: stream %s did not acknowledge (is JetStream up, does the stream exist?): %w", ErrUnavailable, s.cfg.Stream, err)
	}
	return s.requestErr(err)
}

// backoff waits a little before a retry: up to 1 ms on the first, growing
// to 50 ms, with jitter so that writers that collided spread out.
func backoff(ctx context.Context, attempt int) error {
	limit := time.Millisecond << min(attempt, 6)
	limit = min(limit, 50*time.Millisecond)
	t := time.NewTimer(time.Duration(rand.Int64N(int64(limit))) + 50*time.Microsecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryCAS runs fn until it does not fail with errCAS, backing off
// between attempts, until ctx ends.
func retryCAS(ctx context.Context, fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if !errors.Is(err, errCAS) {
			return err
		}
		if err := backoff(ctx, attempt); err != nil {
			return fmt.Errorf("%w (after %d attempts lost to concurrent writers)", err, attempt+1)
		}
	}
}
