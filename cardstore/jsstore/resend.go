package jsstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// Resending. A JetStream request is sent in attempts of
// Config.AttemptTimeout: when the stream leader dies with a request in
// flight, or a reply is lost, the request is sent again instead of
// waiting out its whole bound, and reaches the new leader once one is
// elected (until then the stream has no responder, and publish and
// request ask again every few milliseconds). A read is resent as it is. A
// write is resent because every write is a compare-and-set (see publish);
// what it did is then read back, never guessed:
//
//   - a batch whose copy fails its expectation is planned again by its
//     group (commitGroup), and a Put whose cards are all stored, byte for
//     byte, is a no-op that succeeds: stored once, reported stored;
//   - a single record whose copy fails its expectation is compared with
//     the record stored on its subject (storedCopy): the same bytes mean
//     an earlier copy was stored;
//   - a write still unanswered when its bound ends is read back the same
//     way, for one more attempt's time (unknownOutcome, settleUnknown);
//     when that does not find it, the error wraps ErrUnavailable and says
//     the outcome is unknown. Repeating such a Put is safe: an identical
//     Put is a no-op.

// errUnknownOutcome marks a write whose attempts went unanswered until its
// bound ended: it may or may not be stored.
var errUnknownOutcome = errors.New("jsstore: no acknowledgement before the deadline, so the write may or may not be stored")

// acked ends an attempt that got its acknowledgement; dropAck (tests
// only) makes it a lost one instead: the attempt waits out its bound, as
// when the reply never arrives.
func (s *Store) acked(ctx context.Context, msgs []*nats.Msg, seq uint64) (uint64, error) {
	if s.dropAck != nil && s.dropAck(msgs) {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return seq, nil
}

// unknownOutcome is publish's answer when ctx ended with unanswered
// attempts of msgs: a single record found stored (storedCopy, read within
// one more attempt's time) is a success; otherwise the error wraps
// errUnknownOutcome and ErrUnavailable.
func (s *Store) unknownOutcome(ctx context.Context, msgs []*nats.Msg, unanswered int, last error) (uint64, error) {
	if len(msgs) == 1 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.AttemptTimeout)
		seq, ok, err := s.storedCopy(rctx, msgs[0])
		cancel()
		if err == nil && ok {
			return seq, nil
		}
	}
	return 0, fmt.Errorf("%w: %w (stream %s, %d attempts unanswered, last: %w); repeating it is safe: an identical Put is a no-op",
		ErrUnavailable, errUnknownOutcome, s.cfg.Stream, unanswered, last)
}

// storedCopy reports whether the last record on m's subject is m's data:
// an earlier copy of m was stored (a record's bytes name its write: a
// claim its holder and expiry, a box its update time).
func (s *Store) storedCopy(ctx context.Context, m *nats.Msg) (uint64, bool, error) {
	got, err := s.readLast(ctx, m.Subject, true)
	if err != nil || got == nil {
		return 0, false, err
	}
	return got.seq, bytes.Equal(got.data, m.Data), nil
}

// settleUnknown answers the Puts of a group whose batch ended unanswered
// (publish's errUnknownOutcome): a Put whose cards are all stored, byte for
// byte, succeeded (its batch, or an identical write, stored them); one
// whose cards cannot be read within one more attempt's time gets err.
// Puts that wrote nothing get their planned outcome.
func (s *Store) settleUnknown(live []*putReq, p *plan, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.AttemptTimeout)
	defer cancel()
	for i, r := range live {
		if !p.included[i] {
			r.done <- p.outcome[i]
			continue
		}
		var subjects []string
		for j := range r.pcs {
			if !r.pcs[j].Dup {
				subjects = append(subjects, s.lay.card(r.pcs[j].ProjectID, r.pcs[j].ID))
			}
		}
		stored, rerr := s.readMap(ctx, subjects)
		ok := rerr == nil
		for j := range r.pcs {
			if !ok {
				break
			}
			ok = bytes.Equal(stored[s.lay.card(r.pcs[j].ProjectID, r.pcs[j].ID)], r.pcs[j].Data)
		}
		if ok {
			r.done <- nil
		} else {
			r.done <- err
		}
	}
}
