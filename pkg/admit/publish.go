package admit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/deadline"
)

// Publishing through an election. In a cluster the command stream has
// no leader for a few seconds after its leader's node is lost (a RAFT
// election, 4–9 s in nats-server, longer on a loaded machine); a publish
// then gets "no responders" (nats.go's ErrNoStreamResponse, "no response
// from stream", after its own retries of 0.5 s), JetStream's "temporarily
// unavailable" (err_code 10008), or no acknowledgement at all when the
// leader died with it in flight. Failing the call then would fail a call
// the mesh can take a few seconds later, so the admission sends the
// command again, in attempts of PublishAttempt, until it is acknowledged,
// Config.PublishBound ends or the caller's context does. Every copy has
// the call's Nats-Msg-Id (utp.CallRef), so the stream stores the command
// once however many copies reach it (a copy within its duplicate window
// is acknowledged as a duplicate and stored not again).
//
// Waiting helps only while the cluster can elect a leader: before each
// new attempt the admission asks Config.Quorum, and when the node has
// lost its quorum the call fails at once with ErrUnavailable saying so,
// as it does when the bound ends.

// Defaults of the publish's resending.
const (
	// DefaultPublishBound is Config.PublishBound's default: longer than a
	// command stream's election on a loaded machine (up to 14 s measured,
	// docs/cluster.md), within a dispatch handler's 30 s.
	DefaultPublishBound = 20 * time.Second
	// PublishAttempt bounds one attempt of a publish: far above an
	// acknowledgement's time on a loaded mesh, short enough that a
	// command lost with its leader is sent again soon.
	PublishAttempt = 2 * time.Second
)

// errCodeMsgIDInProcess is JetStream's "duplicate message id is in
// process" (409): another copy with the same Nats-Msg-Id is being stored
// right now — a dispatch request the agent sent again (svc.CallResent)
// reached another admission while the first copy's publish waited out an
// election. That copy's outcome decides: ask again, and the stream
// answers with the stored command (a duplicate) or takes this copy.
const errCodeMsgIDInProcess = 10158

// electing reports whether a publish failed because the stream has no
// leader now (an election under way, or no quorum): nothing was stored by
// that attempt, or (an attempt unanswered) a copy may have been; or
// because another copy of the message is being stored (10158).
func electing(err error, attempt context.Context) bool {
	var apiErr *jetstream.APIError
	switch {
	case deadline.Electing(err):
		return true
	case errors.As(err, &apiErr):
		return apiErr.ErrorCode == errCodeMsgIDInProcess
	}
	return errors.Is(attempt.Err(), context.DeadlineExceeded)
}

// publishMsg publishes m with JetStream, resending it while the stream
// elects a leader (see above). m must carry a Nats-Msg-Id. what names the
// message in the log.
func (s *Service) publishMsg(ctx context.Context, m *nats.Msg, what string) (*jetstream.PubAck, error) {
	if m.Header.Get(jetstream.MsgIDHeader) == "" {
		return nil, fmt.Errorf("admit: publish %s: no %s header (a resent copy would be stored twice)", what, jetstream.MsgIDHeader)
	}
	first := time.Now()
	pause := 25 * time.Millisecond
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, PublishAttempt)
		ack, err := s.js.PublishMsg(actx, m, jetstream.WithRetryAttempts(0))
		again := err != nil && ctx.Err() == nil && electing(err, actx)
		cancel()
		if err == nil || !again {
			return ack, err
		}
		if s.cfg.Quorum != nil {
			if qerr := s.cfg.Quorum(); qerr != nil {
				return nil, fmt.Errorf("%w: the stream has no leader and none can be elected: %w (attempt %d: %w)", ErrUnavailable, qerr, n, err)
			}
		}
		if waited := time.Since(first); waited >= s.cfg.PublishBound {
			return nil, fmt.Errorf("%w: the stream had no leader for %v (%d attempts; last: %w)", ErrUnavailable, waited.Round(time.Millisecond), n, err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("the stream had no leader before the request's deadline (%d attempts; last: %v): %w", n, err, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, 250*time.Millisecond)
		if n == 1 {
			s.log.Info("admit: the command stream has no leader, or another copy is being stored; sending again", "what", what, "err", err)
		}
	}
}
