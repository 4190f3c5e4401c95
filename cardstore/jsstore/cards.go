package jsstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// putCard is one card of a Put, validated and encoded
// (cardstore.PreparePut) before any read.
type putCard = cardstore.PutCard

// Put stores cards atomically; see cardstore.Store. All cards of one Put
// belong to one project. The Put is one atomic batch: the new cards, their
// index entries, the turn summaries and the claim tombstones of new
// results, each guarded by a compare-and-set on what was read; when a
// concurrent writer wins one of them, the Put reads again and retries.
func (s *Store) Put(ctx context.Context, cards ...*card.Card) error {
	return s.put(ctx, cards, nil, nil)
}

// put is Put with check, when not nil, run on the validated cards before
// the batch, and the fence of a tool-scoped result write (nil for Put).
func (s *Store) put(ctx context.Context, cards []*card.Card, check func() error, f *fence) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	leave, err := s.enter()
	if err != nil {
		return err
	}
	defer leave()
	if err := cardstore.CheckPutBatch(len(cards)); err != nil {
		return err
	}
	if len(cards) == 0 {
		return nil
	}
	pcs, _, err := cardstore.PreparePut(cards, s.cfg.MaxCardBytes)
	if err != nil {
		return err
	}
	if n := cardBytes(pcs); n > MaxPutBytes {
		return fmt.Errorf("%w: put of %d cards is %d bytes encoded, more than the limit of %d for one put; put them in several", cardstore.ErrTooLarge, len(pcs), n, MaxPutBytes)
	}
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	return s.commit(ctx, pcs, f)
}

// decodeCard parses a stored card. Stored cards were validated when
// written, so this only parses.
func decodeCard(m *msg) (*card.Card, error) {
	var c card.Card
	if err := json.Unmarshal(m.data, &c); err != nil {
		return nil, fmt.Errorf("jsstore: stored card %s (stream sequence %d) is corrupt: %w", m.subject, m.seq, err)
	}
	return &c, nil
}

// Get returns one card of the project, or an error wrapping
// cardstore.ErrNotFound.
func (s *Store) Get(ctx context.Context, projectID, cardID string) (*card.Card, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := cardstore.CheckGet(projectID, cardID); err != nil {
		return nil, err
	}
	leave, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	return s.getCard(ctx, projectID, cardID)
}

// getCard reads one card.
func (s *Store) getCard(ctx context.Context, projectID, cardID string) (*card.Card, error) {
	m, err := s.readLast(ctx, s.lay.card(projectID, cardID), false)
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, cardstore.CardNotFound(projectID, cardID)
	}
	return decodeCard(m)
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
	leave, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	subjects := make([]string, len(ids))
	for i, id := range ids {
		subjects[i] = s.lay.card(projectID, id)
	}
	stored, err := s.lastMany(ctx, subjects, true)
	if err != nil {
		return nil, err
	}
	res := &cardstore.GetManyResult{Cards: []*card.Card{}, Missing: []string{}}
	for i, m := range stored {
		if m == nil {
			res.Missing = append(res.Missing, ids[i])
			continue
		}
		c, err := decodeCard(m)
		if err != nil {
			return nil, err
		}
		res.Cards = append(res.Cards, c)
	}
	return res, nil
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
	leave, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	m, err := s.readLast(ctx, s.lay.result(projectID, agentTurnID, toolCallID), false)
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, cardstore.ResultNotFound(projectID, agentTurnID, toolCallID)
	}
	c, err := s.getCard(ctx, projectID, string(m.data))
	if err != nil {
		return nil, fmt.Errorf("jsstore: results index names card %s in project %s: %w", m.data, projectID, err)
	}
	return c, nil
}
