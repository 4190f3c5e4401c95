// Package webuitest gives tests of the web UI a webui.Store over a real
// CardStore before the CardStore lists turns itself: Turns answers
// ListTurns for the turns a test announces, from their cards.
//
// When cardstore.Store gains ListTurns (the list_turns op), tests pass the
// store itself and this package goes away.
package webuitest

import (
	"context"
	"slices"
	"sync"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// Turns is a CardStore whose ListTurns lists the turns added with Add,
// newest (last added) first, summarized from their cards. Turns without a
// card yet are left out. Before and AgentID are not supported (one page).
type Turns struct {
	cardstore.Store

	mu  sync.Mutex
	ids []string
}

// New wraps store.
func New(store cardstore.Store) *Turns { return &Turns{Store: store} }

// Add announces a turn (before or after its first card is written).
func (t *Turns) Add(ids ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		if !slices.Contains(t.ids, id) {
			t.ids = append(t.ids, id)
		}
	}
}

// ListTurns summarizes the announced turns of req.ProjectID.
func (t *Turns) ListTurns(ctx context.Context, req cardstore.ListTurnsRequest) (*cardstore.ListTurnsResult, error) {
	t.mu.Lock()
	ids := slices.Clone(t.ids)
	t.mu.Unlock()
	limit := req.Limit
	if limit <= 0 || limit > cardstore.MaxPage {
		limit = cardstore.MaxPage
	}
	out := &cardstore.ListTurnsResult{Turns: []cardstore.TurnInfo{}}
	for i := len(ids) - 1; i >= 0 && len(out.Turns) < limit; i-- {
		cards, err := cardstore.AllTurn(ctx, t.Store, req.ProjectID, ids[i])
		if err != nil {
			return nil, err
		}
		if len(cards) == 0 {
			continue
		}
		info := cardstore.TurnInfo{AgentTurnID: ids[i], AgentID: cards[0].Metadata.AgentID,
			FirstAt: cards[0].CreatedAt, LastAt: cards[len(cards)-1].CreatedAt, Cards: len(cards)}
		for _, c := range cards {
			switch c.Type {
			case card.TypeToolCall:
				info.ToolCalls++
			case card.TypeToolResult:
				info.ToolResults++
			}
		}
		out.Turns = append(out.Turns, info)
	}
	return out, nil
}
