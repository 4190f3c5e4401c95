package deadline

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Attempts of Patiently: the first is short, each timed-out one doubles
// the next, up to MaxAttempt.
const (
	// FirstAttempt bounds Patiently's first attempt. Short on purpose:
	// nats-server leaves some requesters of a stream or bucket that
	// several nodes create at once (the nodes of a cluster starting
	// together) without an answer (nats-server#3677), and a second
	// request, sent once the asset exists, is answered at once. A first
	// attempt of 10 s made a three-node cluster take 2–3 minutes to start
	// (every asset waited out one attempt); a slow but working request
	// just gets longer bounds on the next attempts.
	FirstAttempt = 2 * time.Second
	// MaxAttempt bounds every later attempt.
	MaxAttempt = 30 * time.Second
	// retryPause separates an attempt that failed at once from the next.
	retryPause = time.Second
)

// Patiently runs step until it returns nil, ctx ends, or total has
// passed, and returns step's last error. Each attempt gets its own bound:
// FirstAttempt, doubled after each attempt that timed out, at most
// MaxAttempt. An attempt that timed out (context.DeadlineExceeded while
// ctx itself goes on) is always tried again at once; any other error only
// when again (nil: never) says so, after a pause of a second. For the
// requests that create or open replicated assets while a cluster forms
// or elects leaders.
func Patiently(ctx context.Context, total time.Duration, again func(error) bool, step func(context.Context) error) error {
	end, bound := time.Now().Add(total), FirstAttempt
	for {
		actx, cancel := context.WithTimeout(ctx, bound)
		err := step(actx)
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(end) {
			return err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			bound = min(2*bound, MaxAttempt)
			continue
		}
		if again == nil || !again(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(retryPause):
		}
	}
}

// errCodeUnavailable is JetStream's "JetStream system temporarily
// unavailable": the asset or the meta group has no leader.
const errCodeUnavailable = 10008

// Unavailable reports whether err is JetStream's answer that it cannot
// serve the request yet: "JetStream system temporarily unavailable"
// (err_code 10008), no leader for the asset or the meta group now.
func Unavailable(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeUnavailable
}

// Electing reports whether a JetStream request failed because the asset
// it wrote or read had no leader at that moment — an election under way
// after a node's loss: Unavailable, no responders, or no response from
// the stream. A write that failed so stored nothing, or (no response) may
// have: send it again only when a copy is harmless. For Patiently's again.
func Electing(err error) bool {
	return Unavailable(err) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}
