package cardstore_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

func TestTurnAgent(t *testing.T) {
	ctx := context.Background()
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "cards.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	mk := func(turn, agent string) *card.Card {
		return &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: "message", CreatedAt: time.Now().UTC(),
			Content: json.RawMessage(`{"text":"x"}`), Metadata: card.Metadata{AgentTurnID: turn, AgentID: agent}}
	}
	// Turn "late": twenty cards naming no agent, then bob's (past the
	// first page), then alice's: bob's is the first that names one.
	var late []*card.Card
	for range 20 {
		late = append(late, mk("late", ""))
	}
	late = append(late, mk("late", "bob"), mk("late", "alice"))
	cards := append([]*card.Card{mk("t1", "alice"), mk("t1", "bob"), mk("anon", "")}, late...)
	if err := st.Put(ctx, cards...); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		turn, agent string
		found       bool
	}{
		{"t1", "alice", true},
		{"late", "bob", true},
		{"anon", "", true},
		{"none", "", false},
	} {
		agent, found, err := cardstore.TurnAgent(ctx, st, "demo", tc.turn)
		if err != nil || agent != tc.agent || found != tc.found {
			t.Errorf("TurnAgent(%s) = %q, %v, %v; want %q, %v", tc.turn, agent, found, err, tc.agent, tc.found)
		}
	}
	// Another project's turn of the same id is not this one's.
	if _, found, err := cardstore.TurnAgent(ctx, st, "other", "t1"); err != nil || found {
		t.Errorf("TurnAgent in another project = found %v, %v", found, err)
	}
	// A card's agent is its turn's; a card of no turn is its own agent's.
	noTurn := &card.Card{CardID: card.NewID(), ProjectID: "demo", Metadata: card.Metadata{AgentID: "carol"}}
	for _, tc := range []struct {
		c    *card.Card
		want string
	}{{cards[1], "alice"}, {noTurn, "carol"}} {
		if got, err := cardstore.CardAgent(ctx, st, tc.c); err != nil || got != tc.want {
			t.Errorf("CardAgent(%s) = %q, %v; want %q", tc.c.CardID, got, err, tc.want)
		}
	}
}
