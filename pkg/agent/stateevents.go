package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// stateEventsFlush bounds the flush that registers a state-event
// subscription with the server.
const stateEventsFlush = 10 * time.Second

// StateEvents subscribes to the state events (subjects.StateEvent,
// docs/protocol.md "State events") of resource ("*": every resource) of
// service ("*": every service) in the client's project, and calls handler
// with each, in the order the server delivers them, on one goroutine. The
// subscription is registered with the server before StateEvents returns,
// so a transition committed afterwards is delivered. A payload that is not
// a state event is logged and skipped. stop ends the subscription.
//
// An agent identity may subscribe to its own project's state events only
// (the server refuses any other subscription asynchronously).
func (c *Client) StateEvents(ctx context.Context, service, resource string, handler func(*utp.StateEvent)) (stop func() error, err error) {
	if handler == nil {
		return nil, fmt.Errorf("agent: StateEvents needs a handler")
	}
	pat, err := subjects.StateEventPattern(c.ver, c.project, service, resource)
	if err != nil {
		return nil, fmt.Errorf("agent: state events of %s %s: %w (a resource id is one subject token: letters, digits, - and _)", service, resource, err)
	}
	sub, err := c.nc.Subscribe(pat, func(m *nats.Msg) {
		ev, err := utp.DecodeStateEvent(m.Data)
		if err != nil {
			c.log.Warn("agent: state event skipped", "subject", m.Subject, "err", err)
			return
		}
		handler(ev)
	})
	if err != nil {
		return nil, fmt.Errorf("agent: subscribe to %s: %w", pat, err)
	}
	fctx, cancel := context.WithTimeout(ctx, stateEventsFlush)
	defer cancel()
	if err := c.nc.FlushWithContext(fctx); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("agent: subscribe to %s: %w", pat, err)
	}
	return sub.Unsubscribe, nil
}
