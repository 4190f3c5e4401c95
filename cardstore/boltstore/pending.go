package boltstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// Announced Puts (see "A command before its card" in the package
// documentation). The admission writes a new call's tool.call card and
// publishes its command side by side, so a worker may start the call
// before the card's commit has ended. The admission announces the Put
// first (AnnouncePut); a StartCall that does not find the card it names
// waits while a Put of that card is announced and not ended, then reads
// again.

// pendingPuts is the store's registry of announced Puts, by cards bucket
// key. mu guards m; it is never held across I/O or a wait.
type pendingPuts struct {
	mu sync.Mutex
	m  map[string]*pendingPut
}

// pendingPut is the announced Puts of one card: n of them not ended yet;
// done is closed when the last one ends.
type pendingPut struct {
	n    int
	done chan struct{}
}

// AnnouncePut records that the caller is about to Put the card cardID of
// the project, until it calls done (once its Put has returned, success or
// failure; done is idempotent). Meanwhile a StartCall or StartCallTool
// whose ToolCallCardID is that card and that does not find it waits for
// done (its context bounds the wait) and reads again, so a worker that
// receives the call's command before the card's commit has ended still
// starts the call with its card. Reads are unchanged: a Get of a card
// whose commit has not ended says not found. Announce a card only when a
// Put of it follows at once: a StartCall waits for done however long it
// takes.
func (s *Store) AnnouncePut(projectID, cardID string) (done func()) {
	key := string(cardKey(projectID, cardID))
	p := &s.pending
	p.mu.Lock()
	if p.m == nil {
		p.m = make(map[string]*pendingPut)
	}
	e := p.m[key]
	if e == nil {
		e = &pendingPut{done: make(chan struct{})}
		p.m[key] = e
	}
	e.n++
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if e.n--; e.n == 0 {
				close(e.done)
				delete(p.m, key)
			}
		})
	}
}

// wait returns a channel closed when the announced Puts of the card under
// key have ended, or nil when none is announced.
func (p *pendingPuts) wait(key string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.m[key]; e != nil {
		return e.done
	}
	return nil
}

// awaitCallCard returns the card cardID of the project once it is
// committed, waiting while a Put of it is announced (AnnouncePut); nil
// when it is not stored and no Put of it is announced. StartCall calls it
// after a read that did not find the card: the announcement may have
// ended since that read, so it reads again before deciding without the
// card.
func (s *Store) awaitCallCard(ctx context.Context, projectID, cardID string) (*card.Card, error) {
	key := cardKey(projectID, cardID)
	for {
		// The channel first, then the read: a Put announced now and
		// ended before the read has its commit visible to the read.
		ch := s.pending.wait(string(key))
		var c *card.Card
		err := s.view(func(b *buckets) error {
			var err error
			if data := b.cards.Get(key); data != nil {
				c, err = decodeCard(data)
			}
			return err
		})
		if err != nil || c != nil || ch == nil {
			return c, err
		}
		if s.awaitHook != nil {
			s.awaitHook()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("boltstore: wait for the announced Put of tool.call card %s in project %s: %w", cardID, projectID, ctx.Err())
		}
	}
}
