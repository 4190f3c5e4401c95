package agent

import (
	"context"
	"sync"

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
const (
	// maxAcksInFlight bounds the acks a client has in flight; a Call that
	// finds them all taken waits for one (backpressure on a slow inbox).
	maxAcksInFlight = 256
	// ackTimeout bounds one background ack, and Close's wait for them.
	ackTimeout = svc.DefaultTimeout
)

// ackTracker is a client's set of lazy acks in flight.
type ackTracker struct {
	slots chan struct{} // one per ack in flight; capacity maxAcksInFlight

	mu       sync.Mutex
	next     uint64
	inflight map[uint64]chan struct{} // closed when the ack has its answer
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
	done := make(chan struct{})
	c.acks.mu.Lock()
	id := c.acks.next
	c.acks.next++
	c.acks.inflight[id] = done
	c.acks.mu.Unlock()
	c.mu.Unlock()
	go func() {
		defer func() {
			c.acks.mu.Lock()
			delete(c.acks.inflight, id)
			c.acks.mu.Unlock()
			close(done)
			<-c.acks.slots
		}()
		actx, cancel := context.WithTimeout(context.Background(), ackTimeout)
		defer cancel()
		if _, err := c.inbox.AckLazy(actx, c.project, inboxID); err != nil {
			c.log.Warn("agent: lazy ack failed: the entry stays pending, and Resume lists its result as unconsumed",
				"inbox_id", inboxID, "tool_call_id", callID, "err", err)
		}
	}()
	return nil
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
