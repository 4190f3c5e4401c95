package admit

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/gopool"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// The command beside its card (Config.PublishBesideCard). A new admitted
// call's two durable writes, the tool.call card's commit and the
// command's JetStream publish, run side by side, so the agent waits for
// the longer of the two instead of their sum. The CardStore is told of
// the Put, with the card, before either starts (CardAnnouncer): a worker
// that gets the command before the card's commit has ended waits for it
// in StartCall, and the node's in-process worker starts the call on the
// announced card (its result commits with or after the card). The signed admission covers the content hash of the
// card being written, as on the sequential path.
//
// Only a new call takes this path: a cheap read first looks for the
// call's card, and a call that has one (a resend, a conflicting
// dispatch) takes the sequential path unchanged. Two dispatches of one
// call in this process are serialized from that read to their answer,
// so a second one sees the first one's card. The Put runs to its end
// even when the dispatch's context ends first (its command is out). When
// the Put fails the error is the answer, as on the sequential path, and
// the published command has no card: a worker that had started on the
// announced card stores the card with its result; one that had not finds
// no card and retries the command a few times (the agent, which got no
// answer or an error, sends the dispatch again, and that writes the
// card) before failing it bad_request.

// CardAnnouncer is a CardStore that can be told that a Put of a card is
// about to be made; its StartCall then waits for that Put, or starts the
// call on the card, when it does not find it stored
// (boltstore.Store.AnnouncePut). done is called with the Put's outcome
// once it has returned.
type CardAnnouncer interface {
	AnnouncePut(c *card.Card) (done func(err error))
}

// dispatchBeside answers an admitted call whose tool.call card is cc:
// a new call's card is written and its command published side by side;
// a call whose card exists takes the sequential path.
func (s *Service) dispatchBeside(ctx context.Context, ts subjects.ToolSubject, req *utp.DispatchRequest, cc *card.Card,
	target string, ae card.AfterExecution, principal string, d *decision) (any, error) {
	end, err := s.serialize(ctx, cc.ProjectID+"\x00"+cc.CardID)
	if err != nil {
		return nil, fmt.Errorf("admit: wait for another dispatch of tool_call_id %s: %w", req.ToolCallID, err)
	}
	defer end()
	_, gerr := s.cfg.Store.Get(ctx, cc.ProjectID, cc.CardID)
	if !errors.Is(gerr, cardstore.ErrNotFound) {
		// The card exists (a resend, a conflict), or the read failed:
		// the sequential path decides, exactly as without this option.
		stored, _, err := s.storeCallCard(ctx, req, cc, principal)
		if err != nil {
			return nil, err
		}
		if err := s.publish(ctx, ts, req, stored, target, ae, principal, d.jti); err != nil {
			return nil, err
		}
		return dispatchReply(req, d, stored, target, ae), nil
	}
	m, err := s.command(ts, req, cc, target, ae, principal, d.jti)
	if err != nil {
		return nil, err
	}
	var outboxed *nats.Msg
	if s.cfg.Outbox != nil {
		outboxed = m
	}
	done := s.announce.AnnouncePut(cc)
	published := make(chan error, 1)
	gopool.Go(func() { published <- s.send(ctx, m, req, cc, target) })
	// A worker may start on the announced card: its Put is not given up.
	stored, _, err := s.storeCallCardWith(context.WithoutCancel(ctx), req, cc, principal, outboxed)
	done(err)
	perr := <-published
	if err != nil {
		return nil, err
	}
	if perr != nil {
		return nil, perr
	}
	return dispatchReply(req, d, stored, target, ae), nil
}

// serialize waits until no other dispatch of this process holds key, then
// holds it until end is called.
func (s *Service) serialize(ctx context.Context, key string) (end func(), err error) {
	for {
		s.mu.Lock()
		busy, ok := s.fresh[key]
		if !ok {
			ch := make(chan struct{})
			s.fresh[key] = ch
			s.mu.Unlock()
			return func() {
				s.mu.Lock()
				delete(s.fresh, key)
				s.mu.Unlock()
				close(ch)
			}, nil
		}
		s.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
