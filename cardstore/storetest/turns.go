package storetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// withAgent sets metadata.agent_id of c and returns it.
func withAgent(c *card.Card, agentID string) *card.Card {
	c.Metadata.AgentID = agentID
	return c
}

// listAllTurns follows ListTurns pages of limit turns and checks the page
// rules on the way: no page above the limit, only the last page short,
// Next 0 exactly on the last page.
func listAllTurns(t *testing.T, s cardstore.Store, req cardstore.ListTurnsRequest) []cardstore.TurnInfo {
	t.Helper()
	var out []cardstore.TurnInfo
	for pages := 1; ; pages++ {
		page, err := s.ListTurns(t.Context(), req)
		if err != nil {
			t.Fatalf("list turns %+v, page %d: %v", req, pages, err)
		}
		if page.Turns == nil {
			t.Fatalf("list turns %+v, page %d: Turns is nil, want an empty list at worst", req, pages)
		}
		if req.Limit > 0 && len(page.Turns) > req.Limit {
			t.Fatalf("list turns limit %d, page %d: %d turns", req.Limit, pages, len(page.Turns))
		}
		out = append(out, page.Turns...)
		if page.Next == 0 {
			return out
		}
		if req.Limit > 0 && len(page.Turns) != req.Limit {
			t.Fatalf("list turns limit %d, page %d: %d turns but Next %d: only the last page may be short", req.Limit, pages, len(page.Turns), page.Next)
		}
		if pages > 10000 {
			t.Fatalf("list turns %+v: paging does not end", req)
		}
		req.Before = page.Next
	}
}

// turnIDs lists the AgentTurnID of each turn.
func turnIDs(turns []cardstore.TurnInfo) []string {
	out := make([]string, len(turns))
	for i, ti := range turns {
		out[i] = ti.AgentTurnID
	}
	return out
}

// sameTurnIDs fails unless got lists exactly the turns want, in order.
func sameTurnIDs(t *testing.T, what string, got []cardstore.TurnInfo, want ...string) {
	t.Helper()
	if g, w := strings.Join(turnIDs(got), ","), strings.Join(want, ","); g != w {
		t.Fatalf("%s: turns [%s], want [%s]", what, g, w)
	}
}

// wantTurn fails unless ti summarizes turn with the given agent, counts and
// first and last cards.
func wantTurn(t *testing.T, ti cardstore.TurnInfo, turn, agent string, cards, calls, results int, first, last *card.Card) {
	t.Helper()
	if ti.AgentTurnID != turn || ti.AgentID != agent || ti.Cards != cards || ti.ToolCalls != calls || ti.ToolResults != results {
		t.Fatalf("turn %s = %+v, want agent %q, %d cards, %d tool.call, %d tool.result", turn, ti, agent, cards, calls, results)
	}
	if !ti.FirstAt.Equal(first.CreatedAt) || !ti.LastAt.Equal(last.CreatedAt) {
		t.Fatalf("turn %s: first_at %v, last_at %v; want %v (card %s) and %v (card %s)",
			turn, ti.FirstAt, ti.LastAt, first.CreatedAt, first.CardID, last.CreatedAt, last.CardID)
	}
}

// at returns c with created_at set to base plus n seconds, so that the
// summary's first and last times are told apart.
func at(c *card.Card, base time.Time, n int) *card.Card {
	c.CreatedAt = base.Add(time.Duration(n) * time.Second)
	return c
}

func testListTurns(t *testing.T, s cardstore.Store) {
	const p = "proj-turns"
	ctx := t.Context()
	base := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)

	// t-a: a call and its result, then (later) a note.
	aCall := at(withAgent(ToolCallCard(p, "t-a", "c1"), "agent-a"), base, 0)
	aRes := at(ToolResultCard(p, "t-a", "c1", card.StatusSuccess), base, 1)
	mustPut(t, s, aCall, aRes)
	// t-b: its first card is a result that names no agent; the agent is
	// learnt from the call card written after it. Cards of no turn and a
	// card of another project in between change nothing.
	bRes := at(ToolResultCard(p, "t-b", "c1", card.StatusFailed), base, 2)
	mustPut(t, s, bRes, NoteCard(p, "", "no turn"))
	mustPut(t, s, NoteCard(p+"-other", "t-b", "other project"))
	bCall := at(withAgent(ToolCallCard(p, "t-b", "c2"), "agent-b"), base, 3)
	mustPut(t, s, bCall)
	// t-c: two calls in one put, one of which has a result.
	c1 := at(withAgent(ToolCallCard(p, "t-c", "c1"), "agent-a"), base, 4)
	c2 := at(withAgent(ToolCallCard(p, "t-c", "c2"), "agent-a"), base, 5)
	c1r := at(ToolResultCard(p, "t-c", "c1", card.StatusSuccess), base, 6)
	mustPut(t, s, c1, c2, c1r)
	// More cards of the oldest turn do not move it.
	aNote := at(NoteCard(p, "t-a", "later"), base, 7)
	mustPut(t, s, aNote)
	// Repeats and refused puts count nothing.
	mustPut(t, s, aCall, aRes, c1)
	wantErr(t, "second result", s.Put(ctx, at(ToolResultCard(p, "t-c", "c1", card.StatusFailed), base, 8)), cardstore.ErrResultExists)
	conflicting := clone(aNote)
	conflicting.Content = json.RawMessage(`{"text":"changed"}`)
	wantErr(t, "conflicting put", s.Put(ctx, NoteCard(p, "t-a", "with a conflict"), conflicting), cardstore.ErrConflict)

	all := listAllTurns(t, s, cardstore.ListTurnsRequest{ProjectID: p})
	sameTurnIDs(t, "all turns, newest first", all, "t-c", "t-b", "t-a")
	wantTurn(t, all[0], "t-c", "agent-a", 3, 2, 1, c1, c1r)
	wantTurn(t, all[1], "t-b", "agent-b", 2, 1, 1, bRes, bCall)
	wantTurn(t, all[2], "t-a", "agent-a", 3, 1, 1, aCall, aNote)

	// The agent filter keeps each turn at the place of its first card.
	sameTurnIDs(t, "turns of agent-a", listAllTurns(t, s, cardstore.ListTurnsRequest{ProjectID: p, AgentID: "agent-a"}), "t-c", "t-a")
	sameTurnIDs(t, "turns of agent-b", listAllTurns(t, s, cardstore.ListTurnsRequest{ProjectID: p, AgentID: "agent-b"}), "t-b")
	sameTurnIDs(t, "turns of an unknown agent", listAllTurns(t, s, cardstore.ListTurnsRequest{ProjectID: p, AgentID: "agent-z"}))
	sameTurnIDs(t, "turns of an agent prefix", listAllTurns(t, s, cardstore.ListTurnsRequest{ProjectID: p, AgentID: "agent"}))

	// Project isolation: the other project has its own t-b, with one card.
	other := listAllTurns(t, s, cardstore.ListTurnsRequest{ProjectID: p + "-other"})
	sameTurnIDs(t, "turns of the other project", other, "t-b")
	if other[0].Cards != 1 || other[0].AgentID != "" || other[0].ToolResults != 0 {
		t.Fatalf("turn t-b of the other project = %+v, want 1 card, no agent, no result", other[0])
	}
	sameTurnIDs(t, "turns of an empty project", listAllTurns(t, s, cardstore.ListTurnsRequest{ProjectID: "proj-turns-none"}))

	// A limit above MaxPage means MaxPage.
	page, err := s.ListTurns(ctx, cardstore.ListTurnsRequest{ProjectID: p, Limit: cardstore.MaxPage + 1})
	if err != nil {
		t.Fatalf("limit above MaxPage: %v", err)
	}
	sameTurnIDs(t, "limit above MaxPage", page.Turns, "t-c", "t-b", "t-a")
	if page.Next != 0 {
		t.Errorf("one page of everything: Next %d, want 0", page.Next)
	}
}

func testListTurnsPaging(t *testing.T, s cardstore.Store) {
	const p, n = "proj-turns-pages", 23
	// n turns, alternating agents; each turn's cards are spread over two
	// puts so that the turns' later cards interleave with newer turns.
	var newestFirst, evenNewestFirst []string
	for i := range n {
		turn, agent := fmt.Sprintf("turn-%02d", i), fmt.Sprintf("agent-%d", i%2)
		mustPut(t, s, withAgent(ToolCallCard(p, turn, "c"), agent))
		if i > 0 {
			mustPut(t, s, ToolResultCard(p, fmt.Sprintf("turn-%02d", i-1), "c", card.StatusSuccess))
		}
		newestFirst = append([]string{turn}, newestFirst...)
		if i%2 == 0 {
			evenNewestFirst = append([]string{turn}, evenNewestFirst...)
		}
	}
	for _, limit := range []int{1, 4, 7, n - 1, n, n + 1} {
		got := listAllTurns(t, s, cardstore.ListTurnsRequest{ProjectID: p, Limit: limit})
		sameTurnIDs(t, fmt.Sprintf("limit %d", limit), got, newestFirst...)
		got = listAllTurns(t, s, cardstore.ListTurnsRequest{ProjectID: p, AgentID: "agent-0", Limit: limit})
		sameTurnIDs(t, fmt.Sprintf("agent-0, limit %d", limit), got, evenNewestFirst...)
	}

	// A page boundary does not move while turns are written: a cursor
	// taken before a new turn still yields exactly the older turns.
	first, err := s.ListTurns(t.Context(), cardstore.ListTurnsRequest{ProjectID: p, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	sameTurnIDs(t, "first page", first.Turns, newestFirst[:5]...)
	mustPut(t, s, withAgent(ToolCallCard(p, "turn-new", "c"), "agent-0"), NoteCard(p, newestFirst[7], "late card of an old turn"))
	rest := listAllTurns(t, s, cardstore.ListTurnsRequest{ProjectID: p, Before: first.Next, Limit: 5})
	sameTurnIDs(t, "pages after a new turn", rest, newestFirst[5:]...)
	top, err := s.ListTurns(t.Context(), cardstore.ListTurnsRequest{ProjectID: p, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	sameTurnIDs(t, "newest after a new turn", top.Turns, "turn-new")
	for _, ti := range rest {
		want := 2
		if ti.AgentTurnID == newestFirst[7] {
			want = 3
		}
		if ti.Cards != want || ti.ToolCalls != 1 || ti.ToolResults != 1 {
			t.Errorf("turn %s = %+v, want %d cards, 1 tool.call, 1 tool.result", ti.AgentTurnID, ti, want)
		}
	}
}

// testListTurnsInvalid checks that bad requests are ErrInvalid.
func testListTurnsInvalid(t *testing.T, s cardstore.Store) {
	ctx := t.Context()
	tests := []struct {
		name string
		req  cardstore.ListTurnsRequest
	}{
		{"no project", cardstore.ListTurnsRequest{}},
		{"project with a dot", cardstore.ListTurnsRequest{ProjectID: "a.b"}},
		{"negative limit", cardstore.ListTurnsRequest{ProjectID: "p", Limit: -1}},
		{"agent id over MaxIDLen", cardstore.ListTurnsRequest{ProjectID: "p", AgentID: strings.Repeat("a", card.MaxIDLen+1)}},
		{"agent id with NUL", cardstore.ListTurnsRequest{ProjectID: "p", AgentID: "a\x00b"}},
	}
	for _, tc := range tests {
		_, err := s.ListTurns(ctx, tc.req)
		wantErr(t, "list turns with "+tc.name, err, cardstore.ErrInvalid)
	}
	if _, err := s.ListTurns(ctx, cardstore.ListTurnsRequest{ProjectID: "p", AgentID: strings.Repeat("a", card.MaxIDLen)}); err != nil {
		t.Errorf("list turns with an agent id of MaxIDLen bytes: %v", err)
	}
}
