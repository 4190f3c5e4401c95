package boltstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// Announced Puts (see "A command before its card" in the package
// documentation). The admission writes a new call's tool.call card and
// publishes its command side by side, so a worker may start the call
// before the card's commit has ended. The admission announces the Put
// first (AnnouncePut), with the card. A StartCall that does not find the
// card it names waits for the announced Put; StartCallEarly (the node's
// own worker) starts the call on the announced card at once. The call's
// result is never stored before its card: until the announced Put has
// stored the card, a call started early is remembered with it
// (started), and a result's transaction that does not find the card
// stores it first.

// pendingPuts is the store's registry of announced Puts, by cards bucket
// key, and of the calls started early on them. mu guards m and started;
// it is never held across I/O or a wait, and no other lock is taken
// while it is held.
type pendingPuts struct {
	mu sync.Mutex
	m  map[string]*pendingPut
	// started maps the claim key (project 0x00 call key) of each call
	// started early on an announced card to that announcement, until a
	// Put of the card has stored it or the call's result has; nstarted
	// is its size, read without mu.
	started  map[string]*pendingPut
	nstarted atomic.Int32
}

// pendingPut is the announced Puts of one card: n of them not ended yet;
// done is closed when the last one ends. prep is the card, validated and
// encoded; calls are the claim keys of the calls started early on it.
type pendingPut struct {
	n     int
	done  chan struct{}
	prep  putCard
	calls []string
}

// AnnouncePut records that the caller is about to Put the tool.call card
// c, until it calls done with the Put's outcome (once its Put has
// returned; done is idempotent). Meanwhile a StartCall or StartCallTool
// whose ToolCallCardID is that card and that does not find it waits for
// done (its context bounds the wait) and reads again, and a
// StartCallEarly of the card's own call starts the call on c at once.
// Reads are unchanged: a Get of a card whose commit has not ended says
// not found. A card the Put would refuse (not a valid tool.call card of a
// turn, too large) is not announced: done does nothing, and StartCall
// decides without it. Announce a card only when a Put of it follows at
// once and its command is (about to be) published: a StartCall waits for
// done however long it takes.
func (s *Store) AnnouncePut(c *card.Card) (done func(err error)) {
	if c == nil || c.Type != card.TypeToolCall || c.Metadata.AgentTurnID == "" || c.ToolCallID == "" {
		return func(error) {}
	}
	pcs, _, err := s.preparePut([]*card.Card{c})
	if err != nil {
		return func(error) {}
	}
	key := string(pcs[0].key)
	p := &s.pending
	p.mu.Lock()
	if p.m == nil {
		p.m = make(map[string]*pendingPut)
	}
	e := p.m[key]
	if e == nil {
		e = &pendingPut{done: make(chan struct{}), prep: pcs[0]}
		p.m[key] = e
	}
	e.n++
	p.mu.Unlock()
	var once sync.Once
	return func(err error) {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if err == nil {
				// The card is stored: its calls' results need not store it.
				for _, call := range e.calls {
					if p.started[call] == e {
						delete(p.started, call)
					}
				}
				e.calls = nil
				p.nstarted.Store(int32(len(p.started)))
			}
			if e.n--; e.n == 0 {
				close(e.done)
				delete(p.m, key)
			}
		})
	}
}

// lookup returns the announcement of the card under key: a channel closed
// when its Puts have ended (nil when none is announced), and the
// announcement itself when its card is the tool.call card of (turn,
// call), else nil.
func (p *pendingPuts) lookup(key, turn, call string) (<-chan struct{}, *pendingPut) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.m[key]
	if e == nil {
		return nil, nil
	}
	if e.prep.Turn != turn || e.prep.card.ToolCallID != call {
		return e.done, nil
	}
	return e.done, e
}

// prepared returns the validated and encoded card c when c itself is
// announced (so its Put need not encode it again).
func (p *pendingPuts) prepared(c *card.Card) (putCard, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.m[string(cardKey(c.ProjectID, c.CardID))]; e != nil && e.prep.card == c {
		return e.prep, true
	}
	return putCard{}, false
}

// record notes that the call whose claim key is claimKey started early on
// the announcement e.
func (p *pendingPuts) record(claimKey string, e *pendingPut) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slices.Contains(e.calls, claimKey) {
		e.calls = append(e.calls, claimKey)
	}
	if p.started == nil {
		p.started = make(map[string]*pendingPut)
	}
	p.started[claimKey] = e
	p.nstarted.Store(int32(len(p.started)))
}

// startedCards returns the announced cards the calls of claimKeys started
// early on, whose Puts have not stored them yet.
func (p *pendingPuts) startedCards(claimKeys []string) []putCard {
	if p.nstarted.Load() == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var cards []putCard
	for _, k := range claimKeys {
		if e := p.started[k]; e != nil {
			cards = append(cards, e.prep)
		}
	}
	return cards
}

// forget drops the calls of claimKeys from started once their results
// (and so their cards) are stored.
func (p *pendingPuts) forget(claimKeys []string) {
	if p.nstarted.Load() == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range claimKeys {
		delete(p.started, k)
	}
	p.nstarted.Store(int32(len(p.started)))
}

// callCard returns the card cardID of the project for a StartCall of the
// call (turn, call), after a read that did not find it. early: the
// announced card of that call, at once (e is its announcement; the card
// is a fresh copy). Otherwise it waits while a Put of the card is
// announced (ctx bounds the wait) and reads it again; nil when it is not
// stored and no Put of it is announced. The channel is taken before each
// read: a Put announced now and ended before the read has its commit
// visible to the read.
func (s *Store) callCard(ctx context.Context, projectID, cardID, turn, call string, early bool) (c *card.Card, e *pendingPut, err error) {
	key := cardKey(projectID, cardID)
	for {
		ch, ann := s.pending.lookup(string(key), turn, call)
		if early && ann != nil {
			c, err := decodeCard(ann.prep.Data)
			return c, ann, err
		}
		err := s.view(func(b *buckets) error {
			var err error
			if data := b.cards.Get(key); data != nil {
				c, err = decodeCard(data)
			}
			return err
		})
		if err != nil || c != nil || ch == nil {
			return c, nil, err
		}
		if s.awaitHook != nil {
			s.awaitHook()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("boltstore: wait for the announced Put of tool.call card %s in project %s: %w", cardID, projectID, ctx.Err())
		}
	}
}
