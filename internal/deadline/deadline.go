// Package deadline bounds the mesh's waits on NATS. Every request to a
// store, a bucket or a service — a CardStore or KV read from a JetStream
// stream leader, a batch commit, a svc request — goes through Request,
// RequestMsg or NextMsg, which give a context without a deadline the
// Default one, so a server that never answers (a stream without a leader,
// a stalled replica) costs a caller an error after a bounded time, never
// a hang.
//
// The rule is held by a test (TestEveryRequestHasADeadline): outside this
// package, no non-test file of the module calls a nats.Conn request method
// (Request, RequestWithContext, RequestMsg, RequestMsgWithContext,
// OldRequest…) nor Subscription.NextMsgWithContext itself. JetStream API
// calls of nats.go's jetstream package bound themselves (5 s when the
// context has no deadline: its jetstream.WithDefaultTimeout), and the
// mesh's service clients (pkg/svc) send through this package with their
// own default (svc.DefaultTimeout).
package deadline

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// Default bounds a request whose context has no deadline.
const Default = 10 * time.Second

// Bound returns ctx when it has a deadline, else ctx bounded by d (Default
// when d is not positive). The cancel function is never nil.
func Bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	if d <= 0 {
		d = Default
	}
	return context.WithTimeout(ctx, d)
}

// Request sends data on subj and waits for one reply, until ctx's deadline
// or, when ctx has none, for Default. A wait that ends without a reply
// returns an error matching context.DeadlineExceeded.
func Request(ctx context.Context, nc *nats.Conn, subj string, data []byte) (*nats.Msg, error) {
	ctx, cancel := Bound(ctx, 0)
	defer cancel()
	return nc.RequestWithContext(ctx, subj, data)
}

// RequestMsg is Request for a message with headers.
func RequestMsg(ctx context.Context, nc *nats.Conn, m *nats.Msg) (*nats.Msg, error) {
	ctx, cancel := Bound(ctx, 0)
	defer cancel()
	return nc.RequestMsgWithContext(ctx, m)
}

// NextMsg waits for the next message of sub (the replies of a request
// sent with PublishRequest, say), until ctx's deadline or, when ctx has
// none, for Default.
func NextMsg(ctx context.Context, sub *nats.Subscription) (*nats.Msg, error) {
	ctx, cancel := Bound(ctx, 0)
	defer cancel()
	return sub.NextMsgWithContext(ctx)
}

// Within bounds ctx by d (Default when d is not positive) even when ctx
// has a later deadline: for one request of a longer operation, so that a
// lost reply costs the request's bound, not the whole operation's time.
func Within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		d = Default
	}
	return context.WithTimeout(ctx, d)
}
