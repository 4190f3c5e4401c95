package agent

import (
	"context"
	"errors"
	"sync"

	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// Call acknowledges a call's inbox entry lazily: the inbox answers at
// once, shows the entry acknowledged to every read and writes the ack with
// its next transaction, and a lazy ack lost to a crash only makes a
// resuming runtime see the result once more. So Call does not wait for the
// answer either: it sends the ack and returns the Outcome (at c=1 over the
// wire the answer's round trip was a tenth of a call's latency). The
// client's own reads of the inbox (Resume) first wait for the acks it has
// in flight, Close waits for them, and a failed ack is logged.
//
// The acks leave in batches, as a group commit does: one request is in
// flight at a time, and the acks of the Calls that end meanwhile go
// together in the next one (the inbox's ack takes up to inbox.MaxAck
// ids). A lone Call's ack leaves at once; at high concurrency one request
// answers many Calls instead of one each.
const (
	// maxAcksInFlight bounds the acks a client has in flight; a Call that
	// finds them all taken waits for one (backpressure on a slow inbox).
	maxAcksInFlight = 256
	// ackTimeout bounds one background ack request, and Close's wait for
	// them.
	ackTimeout = svc.DefaultTimeout
)

// pendingAck is one Call's lazy ack, queued or sent.
type pendingAck struct {
	id              uint64 // its key in ackTracker.inflight
	inboxID, callID string
	done            chan struct{} // closed when the ack has its answer
}

// ackTracker is a client's set of lazy acks in flight.
type ackTracker struct {
	slots chan struct{} // one per ack in flight; capacity maxAcksInFlight

	mu       sync.Mutex
	next     uint64
	inflight map[uint64]chan struct{} // the done of every ack queued or sent
	queue    []pendingAck             // acks not sent yet
	sending  bool                     // a sender goroutine runs
}

func newAckTracker() ackTracker {
	return ackTracker{slots: make(chan struct{}, maxAcksInFlight), inflight: make(map[uint64]chan struct{})}
}

// ackLazy acknowledges the inbox entry inboxID (of tool call callID)
// lazily, in the background. ctx bounds only the wait for a free slot.
// After Close it acknowledges at once and returns the answer's error.
func (c *Client) ackLazy(ctx context.Context, inboxID, callID string) error {
	select {
	case c.acks.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.acks.slots
		_, err := c.inbox.AckLazy(ctx, c.project, inboxID)
		return err
	}
	a := pendingAck{inboxID: inboxID, callID: callID, done: make(chan struct{})}
	c.acks.mu.Lock()
	a.id = c.acks.next
	c.acks.next++
	c.acks.inflight[a.id] = a.done
	c.acks.queue = append(c.acks.queue, a)
	start := !c.acks.sending
	c.acks.sending = true
	c.acks.mu.Unlock()
	c.mu.Unlock()
	if start {
		go c.sendAcks()
	}
	return nil
}

// sendAcks sends the queued acks, up to inbox.MaxAck per request, one
// request at a time, until the queue is empty.
func (c *Client) sendAcks() {
	for {
		c.acks.mu.Lock()
		n := min(len(c.acks.queue), inbox.MaxAck)
		if n == 0 {
			c.acks.sending = false
			c.acks.mu.Unlock()
			return
		}
		batch := c.acks.queue[:n:n]
		c.acks.queue = c.acks.queue[n:]
		if len(c.acks.queue) == 0 {
			c.acks.queue = nil // let the backing array go
		}
		c.acks.mu.Unlock()
		ids := make([]string, len(batch))
		for i, a := range batch {
			ids[i] = a.inboxID
		}
		errs := c.sendAckBatch(ids)
		c.acks.mu.Lock()
		for _, a := range batch {
			delete(c.acks.inflight, a.id)
		}
		c.acks.mu.Unlock()
		for i, a := range batch {
			if err := errs[i]; err != nil {
				c.log.Warn("agent: lazy ack failed: the entry stays pending, and Resume lists its result as unconsumed",
					"inbox_id", a.inboxID, "tool_call_id", a.callID, "acks_in_request", len(batch), "err", err)
			}
			close(a.done)
			<-c.acks.slots
		}
	}
}

// sendAckBatch sends one lazy ack of ids and returns each id's error. An
// ack of ids of which one has no entry (a turn deleted meanwhile) fails
// whole (ErrNotFound): then each id is acked alone, so only that one
// fails.
func (c *Client) sendAckBatch(ids []string) []error {
	ack := func(ids ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
		defer cancel()
		_, err := c.inbox.AckLazy(ctx, c.project, ids...)
		return err
	}
	errs := make([]error, len(ids))
	err := ack(ids...)
	if err == nil {
		return errs
	}
	if len(ids) == 1 || !errors.Is(err, inbox.ErrNotFound) {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for i, id := range ids {
		errs[i] = ack(id)
	}
	return errs
}

// Flush waits until the inbox has answered the lazy acks of every Call
// that returned before Flush was called (Call does not wait for them), or
// ctx ends. Read the inbox through Inbox() after Flush to see those entries
// acknowledged; Resume and Close flush by themselves. A failed ack is
// logged, not returned: its entry stays pending.
func (c *Client) Flush(ctx context.Context) error { return c.waitAcks(ctx) }

// waitAcks waits until every lazy ack in flight when it was called has
// its answer, or ctx ends.
func (c *Client) waitAcks(ctx context.Context) error {
	c.acks.mu.Lock()
	pending := make([]chan struct{}, 0, len(c.acks.inflight))
	for _, done := range c.acks.inflight {
		pending = append(pending, done)
	}
	c.acks.mu.Unlock()
	for _, done := range pending {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
