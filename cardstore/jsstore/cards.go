package jsstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// putCard is one card of a Put, validated and encoded before any read.
type putCard struct {
	id, project string
	data        []byte // canonical encoding
	dup         bool   // an identical card appears earlier in the same Put
	turn        string // metadata.agent_turn_id, or ""
	call        string // tool_call_id of a tool.result, else ""
	typ, agent  string
	createdAt   time.Time
}

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
	if len(cards) > cardstore.MaxBatch {
		return fmt.Errorf("%w: put of %d cards exceeds the batch limit of %d", cardstore.ErrTooLarge, len(cards), cardstore.MaxBatch)
	}
	if len(cards) == 0 {
		return nil
	}
	pcs, err := s.preparePut(cards)
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

// preparePut validates and encodes the cards of a Put and checks them
// against each other (the same checks, in the same order, as boltstore).
func (s *Store) preparePut(cards []*card.Card) ([]putCard, error) {
	pcs := make([]putCard, len(cards))
	byID := make(map[string]int, len(cards))
	results := make(map[[2]string]int)
	for i, c := range cards {
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("%w: card %d of %d: %w", cardstore.ErrInvalid, i+1, len(cards), err)
		}
		if c.ProjectID != cards[0].ProjectID {
			return nil, invalid("cards[%d] belongs to project %q and cards[0] to %q: one Put holds one project's cards", i, c.ProjectID, cards[0].ProjectID)
		}
		pc := putCard{id: c.CardID, project: c.ProjectID}
		if t := c.Metadata.AgentTurnID; t != "" {
			if err := checkKeyPart("metadata.agent_turn_id", t); err != nil {
				return nil, fmt.Errorf("card %s: %w", c.CardID, err)
			}
			pc.Turn, pc.Type, pc.AgentID, pc.CreatedAt = t, c.Type, c.Metadata.AgentID, c.CreatedAt.UTC()
		}
		if c.Type == card.TypeToolResult {
			if err := checkKeyPart("tool_call_id", c.ToolCallID); err != nil {
				return nil, fmt.Errorf("card %s: %w", c.CardID, err)
			}
			pc.Call = c.ToolCallID
		}
		data, err := card.Encode(c)
		if err != nil {
			return nil, fmt.Errorf("%w: card %s: %w", cardstore.ErrInvalid, c.CardID, err)
		}
		if len(data) > s.cfg.MaxCardBytes {
			return nil, fmt.Errorf("%w: card %s is %d bytes encoded, more than the limit of %d", cardstore.ErrTooLarge, c.CardID, len(data), s.cfg.MaxCardBytes)
		}
		pc.Data = data
		if j, ok := byID[pc.ID]; ok {
			if !bytes.Equal(pcs[j].Data, data) {
				return nil, fmt.Errorf("%w: card %s appears twice in one put with different bytes", cardstore.ErrConflict, c.CardID)
			}
			pc.Dup = true
		} else {
			byID[pc.ID] = i
		}
		if pc.Call != "" {
			k := [2]string{pc.Turn, pc.Call}
			if j, ok := results[k]; ok && pcs[j].ID != pc.ID {
				return nil, fmt.Errorf("%w: cards %s and %s of one put are both the tool.result of agent_turn_id %q, tool_call_id %q in project %s",
					cardstore.ErrResultExists, pcs[j].ID, pc.ID, pc.Turn, pc.Call, c.ProjectID)
			}
			results[k] = i
		}
		pcs[i] = pc
	}
	return pcs, nil
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
	if err := checkProject(projectID); err != nil {
		return nil, err
	}
	if err := checkCardID("card_id", cardID); err != nil {
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
		return nil, fmt.Errorf("%w: card %s in project %s", cardstore.ErrNotFound, cardID, projectID)
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
		return nil, fmt.Errorf("%w: no tool.result for agent_turn_id %q, tool_call_id %q in project %s", cardstore.ErrNotFound, agentTurnID, toolCallID, projectID)
	}
	c, err := s.getCard(ctx, projectID, string(m.data))
	if err != nil {
		return nil, fmt.Errorf("jsstore: results index names card %s in project %s: %w", m.data, projectID, err)
	}
	return c, nil
}
