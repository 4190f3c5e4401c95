package cardstore

import (
	"bytes"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// PutCard is one card of a Put after PreparePut: validated, canonically
// encoded and checked against the other cards of the Put. A store keeps
// it (or embeds it with its own storage keys) until the write.
type PutCard struct {
	// ID and ProjectID are the card's.
	ID, ProjectID string
	// Data is the card's canonical encoding (card.Encode).
	Data []byte
	// Dup reports that an identical card appears earlier in the same Put.
	Dup bool
	// Turn is metadata.agent_turn_id, or "".
	Turn string
	// Call is the tool_call_id of a tool.result card, else "".
	Call string
	// Type, AgentID and CreatedAt (UTC) feed the turn's summary; set only
	// with a Turn.
	Type, AgentID string
	CreatedAt     time.Time
}

// Key returns the call a tool.result card answers (Call is not "").
func (pc *PutCard) Key() CallKey { return CallKey{AgentTurnID: pc.Turn, ToolCallID: pc.Call} }

// CheckPutBatch applies Put's batch limit (MaxBatch) to n cards.
func CheckPutBatch(n int) error {
	if n > MaxBatch {
		return fmt.Errorf("%w: put of %d cards exceeds the batch limit of %d", ErrTooLarge, n, MaxBatch)
	}
	return nil
}

// PreparePut applies Put's rules that need no stored data, in the same
// order for every store: each card valid (card.Validate), all of one
// project, its agent_turn_id and a result's tool_call_id usable in keys
// (CheckKeyPart), its canonical encoding at most maxCardBytes
// (ErrTooLarge); the same id twice with other bytes is ErrConflict, two
// results of one call ErrResultExists. It returns the cards in order and
// the total of their encodings. The batch limit is CheckPutBatch's.
func PreparePut(cards []*card.Card, maxCardBytes int) ([]PutCard, int, error) {
	pcs := make([]PutCard, len(cards))
	byID := make(map[string]int, len(cards))
	var results map[CallKey]int
	size := 0
	for i, c := range cards {
		if err := c.Validate(); err != nil {
			return nil, 0, fmt.Errorf("%w: card %d of %d: %w", ErrInvalid, i+1, len(cards), err)
		}
		if c.ProjectID != cards[0].ProjectID {
			return nil, 0, Invalid("cards[%d] belongs to project %q and cards[0] to %q: one Put holds one project's cards", i, c.ProjectID, cards[0].ProjectID)
		}
		pc := PutCard{ID: c.CardID, ProjectID: c.ProjectID}
		if t := c.Metadata.AgentTurnID; t != "" {
			if err := CheckKeyPart("metadata.agent_turn_id", t); err != nil {
				return nil, 0, fmt.Errorf("card %s: %w", c.CardID, err)
			}
			pc.Turn, pc.Type, pc.AgentID, pc.CreatedAt = t, c.Type, c.Metadata.AgentID, c.CreatedAt.UTC()
		}
		if c.Type == card.TypeToolResult {
			if err := CheckKeyPart("tool_call_id", c.ToolCallID); err != nil {
				return nil, 0, fmt.Errorf("card %s: %w", c.CardID, err)
			}
			pc.Call = c.ToolCallID
		}
		data, err := card.Encode(c)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: card %s: %w", ErrInvalid, c.CardID, err)
		}
		if len(data) > maxCardBytes {
			return nil, 0, fmt.Errorf("%w: card %s is %d bytes encoded, more than the limit of %d", ErrTooLarge, c.CardID, len(data), maxCardBytes)
		}
		pc.Data = data
		if j, ok := byID[pc.ID]; ok {
			if !bytes.Equal(pcs[j].Data, data) {
				return nil, 0, fmt.Errorf("%w: card %s appears twice in one put with different bytes", ErrConflict, c.CardID)
			}
			pc.Dup = true
		} else {
			byID[pc.ID] = i
		}
		if pc.Call != "" {
			if results == nil {
				results = make(map[CallKey]int)
			}
			if j, ok := results[pc.Key()]; ok && pcs[j].ID != pc.ID {
				return nil, 0, fmt.Errorf("%w: cards %s and %s of one put are both the tool.result of agent_turn_id %q, tool_call_id %q in project %s",
					ErrResultExists, pcs[j].ID, pc.ID, pc.Turn, pc.Call, c.ProjectID)
			}
			results[pc.Key()] = i
		}
		pcs[i] = pc
		size += len(data)
	}
	return pcs, size, nil
}
