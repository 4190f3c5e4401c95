package svc

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/subjects"
)

// Resending. A request can go unanswered although its service is up: the
// process that took it died (a node lost, a worker killed), or the reply
// was lost on a route that closed. A client waiting out its whole
// deadline then stalls its caller for nothing when a second copy would be
// answered at once by another member of the queue group. So an Endpoint
// sends the request of an op that may be repeated again every
// Endpoint.Attempt (DefaultAttempt) until a reply to any copy arrives or
// its deadline ends; the request of any other op is sent once. Which op
// is which is declared by the service next to its op names (Ops), as its
// error codes are (Codes).

// Delivery says whether a client may send an op's request more than once.
type Delivery uint8

// Deliveries of an op.
const (
	// Once: the op changes state, and a second copy could change it
	// again or report failure for a change the first made (a release, an
	// append, an id the server makes up). Its request is sent once and
	// its reply awaited until the deadline. An op an Ops table does not
	// name is Once.
	Once Delivery = iota
	// Read: the op changes nothing. Its request is resent every attempt.
	Read
	// Deduped: the op changes state, but the server applies a copy of
	// the same request at most once and answers it as it answered the
	// first (an identical Put of cards is a no-op; a write keyed by its
	// own id). Its request is resent every attempt.
	Deduped
)

// String names the delivery.
func (d Delivery) String() string {
	switch d {
	case Read:
		return "read"
	case Deduped:
		return "deduped"
	}
	return "once"
}

// Ops is a service's table of its ops' deliveries, declared by the
// service next to its op names and set on its clients' Endpoint (Ops).
type Ops map[string]Delivery

// resends reports whether an op of this table may be resent.
func (o Ops) resends(op string) bool {
	d := o[op]
	return d == Read || d == Deduped
}

// DefaultAttempt is Endpoint.Attempt's default: far above a service's
// answer on a loaded mesh (milliseconds), and short enough that a
// request the answering process took with it when it died is sent again
// soon.
const DefaultAttempt = 2 * time.Second

// opOf is the op of a service subject, plain or tool-scoped ("" when
// subject is neither).
func opOf(subject string) string {
	if ts, err := subjects.ParseToolService(subject); err == nil {
		return ts.Op
	}
	if s, err := subjects.Parse(subject); err == nil {
		return s.Target
	}
	return ""
}

// requestAttempts sends m and waits for a reply until ctx ends; with
// attempt > 0 it sends a copy of m again every attempt while no reply has
// come, and returns the first reply to any copy. An attempt that fails at
// once (no responders, a closed connection) ends the request when no
// other copy is still waiting.
func requestAttempts(ctx context.Context, nc *nats.Conn, m *nats.Msg, attempt time.Duration) (*nats.Msg, error) {
	if attempt <= 0 {
		return deadline.RequestMsg(ctx, nc, m)
	}
	ctx, cancel := deadline.Bound(ctx, DefaultTimeout)
	defer cancel()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	type answer struct {
		msg *nats.Msg
		err error
	}
	answers := make(chan answer)
	send := func() {
		c := &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}
		go func() {
			r, err := deadline.RequestMsg(ctx, nc, c)
			select {
			case answers <- answer{r, err}:
			case <-ctx.Done():
			}
		}()
	}
	send()
	waiting := 1
	next := time.NewTimer(attempt)
	defer next.Stop()
	for {
		select {
		case a := <-answers:
			waiting--
			if a.err == nil || waiting == 0 || ctx.Err() != nil {
				return a.msg, a.err
			}
		case <-next.C:
			send()
			waiting++
			next.Reset(attempt)
		}
	}
}
