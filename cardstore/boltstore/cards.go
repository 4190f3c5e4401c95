package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// putCard is one card of a Put, validated and encoded
// (cardstore.PreparePut) before it reaches the committer, with its keys.
type putCard struct {
	cardstore.PutCard
	key        []byte // cards bucket key
	turnPrefix []byte // turn index prefix (turnrecs), nil without a turn
	resultKey  []byte // result index key (turnrecs), nil unless a tool.result

	card *card.Card // the caller's card, for the ResultHook
}

// Put stores cards atomically; see cardstore.Store. All cards of one Put
// must belong to one project (as over NATS, where the subject names the
// project); mixing projects is ErrInvalid. Validation and
// encoding happen in the caller's goroutine; only the checks against
// stored data and the writes run in the (shared) transaction. A Put of no
// cards succeeds and writes nothing.
func (s *Store) Put(ctx context.Context, cards ...*card.Card) error {
	_, err := s.PutWithEntry(ctx, cards...)
	return err
}

// preparePut validates and encodes the cards of a Put and checks them
// against each other (cardstore.PreparePut), and adds their keys.
func (s *Store) preparePut(cards []*card.Card) ([]putCard, int, error) {
	prepared, size, err := cardstore.PreparePut(cards, s.cfg.maxCardBytes)
	if err != nil {
		return nil, 0, err
	}
	pcs := make([]putCard, len(prepared))
	for i, p := range prepared {
		pc := &pcs[i]
		pc.PutCard, pc.key, pc.card = p, cardKey(p.ProjectID, p.ID), cards[i]
		if p.Turn != "" {
			pc.turnPrefix = turnPrefix(p.ProjectID, p.Turn)
		}
		if p.Call != "" {
			pc.resultKey = resultKey(p.ProjectID, p.Turn, p.Call)
		}
	}
	return pcs, size, nil
}

// applyPut checks every card against the stored data, then writes the new
// ones, their index entries and their turns' summaries; run calls the
// ResultHook for every new tool.result card.
func applyPut(b *buckets, pcs []putCard, run *hookRun) error {
	skip := make([]bool, len(pcs))
	for i := range pcs {
		pc := &pcs[i]
		if pc.Dup {
			skip[i] = true
			continue
		}
		if old := b.cards.Get(pc.key); old != nil {
			if !bytes.Equal(old, pc.Data) {
				return fmt.Errorf("%w: card %s already exists in project %s with other bytes (cards are immutable)", cardstore.ErrConflict, pc.ID, pc.ProjectID)
			}
			skip[i] = true // idempotent repeat: no new index entries either
			continue
		}
		if pc.resultKey != nil {
			if old := b.recs.Get(pc.resultKey); old != nil && string(old) != pc.ID {
				return fmt.Errorf("%w: agent_turn_id %q, tool_call_id %q in project %s already has result card %s; card %s refused",
					cardstore.ErrResultExists, pc.Turn, pc.Call, pc.ProjectID, old, pc.ID)
			}
		}
	}
	var turns turnUpdates
	if err := turns.load(b, pcs, skip); err != nil {
		return err
	}
	for i := range pcs {
		if skip[i] {
			continue
		}
		pc := &pcs[i]
		if err := b.cards.Put(pc.key, pc.Data); err != nil {
			return dirty(fmt.Errorf("boltstore: write card %s: %w", pc.ID, err))
		}
		if pc.turnPrefix != nil {
			seq, err := b.recs.NextSequence()
			if err != nil {
				return dirty(fmt.Errorf("boltstore: index card %s: %w", pc.ID, err))
			}
			if err := b.recs.Put(turnKey(pc.turnPrefix, seq), []byte(pc.ID)); err != nil {
				return dirty(fmt.Errorf("boltstore: index card %s: %w", pc.ID, err))
			}
			turns.add(pc, seq)
		}
		if pc.resultKey != nil {
			if err := b.recs.Put(pc.resultKey, []byte(pc.ID)); err != nil {
				return dirty(fmt.Errorf("boltstore: index result card %s: %w", pc.ID, err))
			}
			if err := releaseCallClaim(b, pc.ProjectID, pc.Turn, pc.Call); err != nil {
				return dirty(fmt.Errorf("boltstore: release the claim of result card %s: %w", pc.ID, err))
			}
			if err := deleteOutbox(b, outboxKey(pc.ProjectID, pc.Turn, pc.Call)); err != nil {
				return dirty(fmt.Errorf("boltstore: delete the outbox entry of result card %s: %w", pc.ID, err))
			}
			if err := run.stored(b, pc); err != nil {
				return dirty(fmt.Errorf("boltstore: result card %s: %w", pc.ID, err))
			}
		}
	}
	return turns.write(b)
}

// decodeCard parses a stored card. Stored cards were validated when
// written and are canonical JSON, so this only parses, in one pass
// (card.Parse). The card copies what it keeps from data, so reads decode
// inside their transaction: copying the bytes out first would cost a
// second copy (and allocation) of every card.
func decodeCard(data []byte) (*card.Card, error) {
	c, err := card.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("boltstore: stored card is corrupt: %w", err)
	}
	return c, nil
}

// cardLookup reads cards of one project within a read transaction with
// one cursor and one key buffer: Bucket.Get allocates a cursor (and its
// stack) and a key per card, which a read of a 10,000-call turn pays
// 20,000 times.
type cardLookup struct {
	cur *bolt.Cursor
	key []byte // project 0x00 card_id
	n   int    // length of the project 0x00 prefix
}

func newCardLookup(b *buckets, projectID string) *cardLookup {
	key := make([]byte, 0, len(projectID)+1+36)
	key = append(append(key, projectID...), sep)
	return &cardLookup{cur: b.cards.Cursor(), key: key, n: len(key)}
}

// get returns the stored bytes of a card (valid until the transaction
// ends), or nil.
func (l *cardLookup) get(cardID string) []byte {
	l.key = append(l.key[:l.n], cardID...)
	return l.seek()
}

// getID is get for an id read from an index (no string conversion).
func (l *cardLookup) getID(cardID []byte) []byte {
	l.key = append(l.key[:l.n], cardID...)
	return l.seek()
}

func (l *cardLookup) seek() []byte {
	k, v := l.cur.Seek(l.key)
	if !bytes.Equal(k, l.key) {
		return nil
	}
	return v
}

// Get returns one card of the project, or an error wrapping
// cardstore.ErrNotFound.
func (s *Store) Get(ctx context.Context, projectID, cardID string) (*card.Card, error) {
	var c *card.Card
	err := s.get(ctx, projectID, cardID, func(data []byte) (err error) {
		c, err = decodeCard(data)
		return err
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// GetJSON is Get for a server that sends the card on (natsstore): it
// appends the card's stored canonical encoding to dst, without decoding
// it.
func (s *Store) GetJSON(ctx context.Context, projectID, cardID string, dst []byte) ([]byte, error) {
	err := s.get(ctx, projectID, cardID, func(data []byte) error {
		dst = append(dst, data...) // copied out of the tx
		return nil
	})
	if err != nil {
		return nil, err
	}
	return dst, nil
}

// get checks the ids and calls found with the card's stored bytes inside
// a read transaction (data is valid only during the call).
func (s *Store) get(ctx context.Context, projectID, cardID string, found func(data []byte) error) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	if err := cardstore.CheckGet(projectID, cardID); err != nil {
		return err
	}
	return s.view(func(b *buckets) error {
		data := b.cards.Get(cardKey(projectID, cardID))
		if data == nil {
			return cardstore.CardNotFound(projectID, cardID)
		}
		return found(data)
	})
}

// GetMany returns the cards of the project with the given ids, in request
// order with duplicates removed; ids with no card are in Missing (also
// deduplicated). A malformed id is an ErrInvalid error, not a missing card.
func (s *Store) GetMany(ctx context.Context, projectID string, cardIDs []string) (*cardstore.GetManyResult, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	ids, err := cardstore.CheckGetMany(projectID, cardIDs)
	if err != nil {
		return nil, err
	}
	res := &cardstore.GetManyResult{Missing: []string{}, Cards: make([]*card.Card, 0, len(ids))}
	err = s.view(func(b *buckets) error {
		cards := newCardLookup(b, projectID)
		for _, id := range ids {
			data := cards.get(id)
			if data == nil {
				res.Missing = append(res.Missing, id)
				continue
			}
			c, err := decodeCard(data) // copies what it keeps: data lives only as long as the tx
			if err != nil {
				return fmt.Errorf("card %s: %w", id, err)
			}
			res.Cards = append(res.Cards, c)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// ListTurn returns one page of a turn's cards in write order. Limit 0 or
// above cardstore.MaxPage means MaxPage; a negative Limit is ErrInvalid.
// Next is the write sequence of the page's last card when more cards
// follow, else 0.
func (s *Store) ListTurn(ctx context.Context, req cardstore.ListTurnRequest) (*cardstore.ListTurnResult, error) {
	res := &cardstore.ListTurnResult{}
	next, err := s.listTurn(ctx, req, func(id, data []byte) error {
		c, err := decodeCard(data) // copies what it keeps: data lives only as long as the tx
		if err != nil {
			return fmt.Errorf("card %s: %w", id, err)
		}
		res.Cards = append(res.Cards, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	res.Next = next
	return res, nil
}

// ListTurnJSON is ListTurn for a server that sends the page on
// (natsstore): it appends the page's cards to dst as a JSON array of
// their stored canonical encodings, without decoding them, and returns
// the extended dst and the cursor of the next page (0 on the last).
func (s *Store) ListTurnJSON(ctx context.Context, req cardstore.ListTurnRequest, dst []byte) ([]byte, uint64, error) {
	dst = append(dst, '[')
	first := true
	next, err := s.listTurn(ctx, req, func(_, data []byte) error {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, data...) // copied out of the tx
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return append(dst, ']'), next, nil
}

// listTurn checks req and calls visit with the id and stored bytes of
// each card of the page, in write order, inside one read transaction
// (data is valid only during the call). It returns the next page's
// cursor.
func (s *Store) listTurn(ctx context.Context, req cardstore.ListTurnRequest, visit func(id, data []byte) error) (uint64, error) {
	if err := checkCtx(ctx); err != nil {
		return 0, err
	}
	limit, err := cardstore.CheckListTurn(req)
	if err != nil {
		return 0, err
	}
	var next uint64
	prefix := turnPrefix(req.ProjectID, req.AgentTurnID)
	err = s.view(func(b *buckets) error {
		cards := newCardLookup(b, req.ProjectID)
		cur := b.recs.Cursor()
		start := turnKey(prefix, req.After)
		k, v := cur.Seek(start)
		if k != nil && bytes.Equal(k, start) {
			k, v = cur.Next() // After is exclusive
		}
		var last uint64
		n := 0
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = cur.Next() {
			if len(k) != len(prefix)+8 {
				continue // cannot happen: turn ids hold no NUL
			}
			if n == limit {
				next = last // more follow
				return nil
			}
			data := cards.getID(v)
			if data == nil {
				return fmt.Errorf("boltstore: turn index of agent_turn_id %q in project %s names card %s, which is missing", req.AgentTurnID, req.ProjectID, v)
			}
			if err := visit(v, data); err != nil {
				return err
			}
			n++
			last = binary.BigEndian.Uint64(k[len(prefix):])
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return next, nil
}

// FindToolResult returns the tool.result card of (agentTurnID, toolCallID)
// in the project, or an error wrapping cardstore.ErrNotFound.
func (s *Store) FindToolResult(ctx context.Context, projectID, agentTurnID, toolCallID string) (*card.Card, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := cardstore.CheckCall(projectID, agentTurnID, toolCallID); err != nil {
		return nil, err
	}
	var c *card.Card
	err := s.view(func(b *buckets) error {
		var err error
		c, err = findResult(b, projectID, agentTurnID, toolCallID)
		if err == nil && c == nil {
			err = cardstore.ResultNotFound(projectID, agentTurnID, toolCallID)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// findResult reads the tool.result card of a call within a transaction,
// or returns nil when the call has none.
func findResult(b *buckets, projectID, agentTurnID, toolCallID string) (*card.Card, error) {
	id := b.recs.Get(resultKey(projectID, agentTurnID, toolCallID))
	if id == nil {
		return nil, nil
	}
	data := b.cards.Get(cardKey(projectID, string(id)))
	if data == nil {
		return nil, fmt.Errorf("boltstore: result index names card %s in project %s, which is missing", id, projectID)
	}
	return decodeCard(data)
}

// isCallCard reports whether data (the stored card id, nil: no card) is
// a tool.call card of the call toolCallID. It reads the two fields only,
// after a byte search that skips most other cards, so scans of a turn
// decode (and validate) only the match.
func isCallCard(data, id []byte, toolCallID string) (bool, error) {
	if data == nil || !bytes.Contains(data, []byte(card.TypeToolCall)) {
		return false, nil
	}
	var head struct {
		Type       string `json:"type"`
		ToolCallID string `json:"tool_call_id"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return false, fmt.Errorf("boltstore: stored card %s is corrupt: %w", id, err)
	}
	return head.Type == card.TypeToolCall && head.ToolCallID == toolCallID, nil
}
