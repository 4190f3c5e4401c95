package boltstore

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// Announced Puts (see "A command before its card" in the package
// documentation). The admission writes a new call's tool.call card and
// publishes its command side by side, so a worker may start the call
// before the card's commit has ended. The admission announces the Put
// first (AnnouncePut), with the card; a StartCall that does not find the
// card it names starts the call on the announced card, without waiting
// for its commit. The call's result is never stored before its card:
// until the announced Put has stored the card, the call is remembered
// with it (started), and a result's transaction that does not find the
// card stores it first.

// pendingPuts is the store's registry of announced Puts, by cards bucket
// key, and of the calls started on them. mu guards m and started; it is
// never held across I/O or a wait.
type pendingPuts struct {
	mu sync.Mutex
	m  map[string]*pendingPut
	// started maps the claim key (project 0x00 call key) of each call
	// started on an announced card to that card, until a Put of it has
	// stored it or the call's result has; nstarted is its size, read
	// without mu.
	started  map[string]*card.Card
	nstarted atomic.Int32
}

// pendingPut is the announced Puts of one card: n of them not ended yet.
// card is the announced card; calls are the claim keys of the calls
// started on it.
type pendingPut struct {
	n     int
	card  *card.Card
	calls []string
}

// AnnouncePut records that the caller is about to Put the tool.call card
// c, until it calls done with the Put's outcome (once its Put has
// returned; done is idempotent). Meanwhile a StartCall or StartCallTool
// whose ToolCallCardID is that card and that does not find it stored
// starts the call on c (the tool check included), so a worker that
// receives the call's command before the card's commit has ended starts
// at once. The claim it takes rides along with the next commit, as any
// in-memory claim, and the call's result commits with or after the card:
// a result whose transaction does not find the card (its Put is not
// queued yet, or failed) stores it first. Reads are unchanged: a Get of a
// card whose commit has not ended says not found. Announce a card only
// when a Put of it follows at once and its command is (about to be)
// published; c must not change afterwards.
func (s *Store) AnnouncePut(c *card.Card) (done func(err error)) {
	key := string(cardKey(c.ProjectID, c.CardID))
	cp := *c
	p := &s.pending
	p.mu.Lock()
	if p.m == nil {
		p.m = make(map[string]*pendingPut)
	}
	e := p.m[key]
	if e == nil {
		e = &pendingPut{card: &cp}
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
					if p.started[call] == e.card {
						delete(p.started, call)
					}
				}
				e.calls = nil
				p.nstarted.Store(int32(len(p.started)))
			}
			if e.n--; e.n == 0 {
				delete(p.m, key)
			}
		})
	}
}

// start returns the announced card under key, recording that the call
// whose claim key is claimKey starts on it; nil when none is announced.
func (p *pendingPuts) start(key, claimKey string) *card.Card {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.m[key]
	if e == nil {
		return nil
	}
	if !slices.Contains(e.calls, claimKey) {
		e.calls = append(e.calls, claimKey)
	}
	if p.started == nil {
		p.started = make(map[string]*card.Card)
	}
	p.started[claimKey] = e.card
	p.nstarted.Store(int32(len(p.started)))
	return e.card
}

// startedCards returns the announced cards the calls of claimKeys started
// on, whose Puts have not stored them yet.
func (p *pendingPuts) startedCards(claimKeys []string) []*card.Card {
	if p.nstarted.Load() == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var cards []*card.Card
	for _, k := range claimKeys {
		if c := p.started[k]; c != nil {
			cards = append(cards, c)
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

// announcedCallCard returns the card cardID of the project for a
// StartCall of the call whose claim key is claimKey, after a read that did
// not find it: the announced card when a Put of it is announced (the call
// starts on it; announced is true), else the card read again (the
// announcement may have ended, its commit visible, since the first read),
// else nil.
func (s *Store) announcedCallCard(projectID, cardID, claimKey string) (c *card.Card, announced bool, err error) {
	key := cardKey(projectID, cardID)
	if c := s.pending.start(string(key), claimKey); c != nil {
		return c, true, nil
	}
	err = s.view(func(b *buckets) error {
		var err error
		if data := b.cards.Get(key); data != nil {
			c, err = decodeCard(data)
		}
		return err
	})
	return c, false, err
}
