package storetest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

func testPutGet(t *testing.T, s cardstore.Store) {
	const p = "proj-putget"
	noTurn := NoteCard(p, "", "no turn")
	nullContent := NoteCard(p, "turn-1", "")
	nullContent.Content = nil
	extra := NoteCard(p, "turn-1", "with extra metadata")
	extra.Metadata.Extra = map[string]json.RawMessage{"x_custom": json.RawMessage(`{"b": 2, "a": [1, 2]}`)}
	extra.Metadata.TurnEpoch = 3
	extra.Metadata.TraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	cards := []*card.Card{
		ToolCallCard(p, "turn-1", "call-1"),
		ToolResultCard(p, "turn-1", "call-1", card.StatusSuccess),
		ToolResultCard(p, "turn-1", "call-2", card.StatusFailed),
		noTurn, nullContent, extra,
	}
	mustPut(t, s, cards...)
	for _, c := range cards {
		got, err := s.Get(t.Context(), p, c.CardID)
		if err != nil {
			t.Fatalf("get %s: %v", c.CardID, err)
		}
		sameCard(t, "get "+c.Type, got, c)
	}
	// The returned card is the caller's: changing it changes nothing stored.
	got, _ := s.Get(t.Context(), p, cards[0].CardID)
	got.Content[0] = '['
	again, err := s.Get(t.Context(), p, cards[0].CardID)
	if err != nil {
		t.Fatal(err)
	}
	sameCard(t, "get after changing a returned card", again, cards[0])
	_, err = s.Get(t.Context(), p, card.NewID())
	wantErr(t, "get of an unknown id", err, cardstore.ErrNotFound)
}

func testCanonicalBytes(t *testing.T, s cardstore.Store) {
	const p = "proj-canon"
	c := NoteCard(p, "turn-1", "")
	c.Content = json.RawMessage("{ \"a\" : [1, 2],\n \"b\": \"x\" }")
	c.CreatedAt = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.FixedZone("CET", 3600))
	mustPut(t, s, c)

	same := clone(c)
	same.Content = json.RawMessage(`{"a":[1,2],"b":"x"}`)
	same.CreatedAt = c.CreatedAt.UTC()
	if err := s.Put(t.Context(), same); err != nil {
		t.Fatalf("re-put with other white space and time zone, same canonical bytes: %v", err)
	}
	got, err := s.Get(t.Context(), p, c.CardID)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Content) != `{"a":[1,2],"b":"x"}` {
		t.Errorf("stored content = %s, want the compact form", got.Content)
	}
	if !got.CreatedAt.Equal(c.CreatedAt) {
		t.Errorf("created_at = %v, want %v", got.CreatedAt, c.CreatedAt)
	}
	page, err := s.ListTurn(t.Context(), cardstore.ListTurnRequest{ProjectID: p, AgentTurnID: "turn-1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Cards) != 1 {
		t.Errorf("turn lists %d cards after a canonical repeat, want 1", len(page.Cards))
	}
}

func testIdempotentRePut(t *testing.T, s cardstore.Store) {
	const p = "proj-idem"
	call := ToolCallCard(p, "turn-1", "call-1")
	res := ToolResultCard(p, "turn-1", "call-1", card.StatusSuccess)
	mustPut(t, s, call, res)
	mustPut(t, s, call, res)
	mustPut(t, s, res)
	note := NoteCard(p, "turn-1", "new")
	mustPut(t, s, call, note, res, note) // repeats mixed with a new card, which is in twice
	all, err := cardstore.AllTurn(t.Context(), s, p, "turn-1")
	if err != nil {
		t.Fatal(err)
	}
	sameCards(t, "turn after repeated puts", all, []*card.Card{call, res, note})
	got, err := s.FindToolResult(t.Context(), p, "turn-1", "call-1")
	if err != nil {
		t.Fatal(err)
	}
	sameCard(t, "tool result after repeats", got, res)
}

func testConflict(t *testing.T, s cardstore.Store) {
	const p = "proj-conflict"
	c := NoteCard(p, "turn-1", "original")
	mustPut(t, s, c)

	other := clone(c)
	other.Content = json.RawMessage(`{"text":"changed"}`)
	wantErr(t, "re-put with other content", s.Put(t.Context(), other), cardstore.ErrConflict)
	later := clone(c)
	later.CreatedAt = c.CreatedAt.Add(time.Nanosecond)
	wantErr(t, "re-put with other created_at", s.Put(t.Context(), later), cardstore.ErrConflict)
	got, err := s.Get(t.Context(), p, c.CardID)
	if err != nil {
		t.Fatal(err)
	}
	sameCard(t, "card after conflicts", got, c)

	// The same id twice in one put with different bytes.
	n := NoteCard(p, "turn-1", "one")
	n2 := clone(n)
	n2.Content = json.RawMessage(`{"text":"two"}`)
	wantErr(t, "one put with an id twice, other bytes", s.Put(t.Context(), n, n2), cardstore.ErrConflict)
	wantNotStored(t, "duplicate id in one put", s, n)
}

func testAtomicity(t *testing.T, s cardstore.Store) {
	const p = "proj-atomic"
	existing := NoteCard(p, "turn-x", "existing")
	existingRes := ToolResultCard(p, "turn-x", "call-x", card.StatusSuccess)
	mustPut(t, s, existing, existingRes)

	conflicting := clone(existing)
	conflicting.Content = json.RawMessage(`{"text":"other"}`)
	bad := NoteCard(p, "turn-a", "bad")
	bad.Type = ""
	big := NoteCard(p, "turn-a", strings.Repeat("x", cardstore.DefaultMaxCardBytes))
	dup := NoteCard(p, "turn-a", "dup")
	dup2 := clone(dup)
	dup2.Content = json.RawMessage(`{"text":"dup2"}`)

	tests := []struct {
		name string
		bad  []*card.Card
		want error
	}{
		{"invalid card", []*card.Card{bad}, cardstore.ErrInvalid},
		{"conflicting id", []*card.Card{conflicting}, cardstore.ErrConflict},
		{"second result", []*card.Card{ToolResultCard(p, "turn-x", "call-x", card.StatusFailed)}, cardstore.ErrResultExists},
		{"two results in one put", []*card.Card{ToolResultCard(p, "turn-y", "call-y", card.StatusSuccess), ToolResultCard(p, "turn-y", "call-y", card.StatusFailed)}, cardstore.ErrResultExists},
		{"too large", []*card.Card{big}, cardstore.ErrTooLarge},
		{"duplicate id with other bytes", []*card.Card{dup, dup2}, cardstore.ErrConflict},
	}
	for _, tc := range tests {
		good1 := ToolCallCard(p, "turn-a", "call-a")
		good2 := NoteCard(p, "turn-a", "good")
		good3 := ToolResultCard(p, "turn-a", "call-a", card.StatusSuccess)
		batch := append(append([]*card.Card{good1, good2}, tc.bad...), good3)
		wantErr(t, tc.name, s.Put(t.Context(), batch...), tc.want)
		wantNotStored(t, tc.name, s, good1, good2, good3)
		page, err := s.ListTurn(t.Context(), cardstore.ListTurnRequest{ProjectID: p, AgentTurnID: "turn-a"})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Cards) != 0 {
			t.Fatalf("%s: turn of the failed put lists %v, want nothing", tc.name, ids(page.Cards))
		}
		_, err = s.FindToolResult(t.Context(), p, "turn-a", "call-a")
		wantErr(t, tc.name+": result of the failed put", err, cardstore.ErrNotFound)
	}
	got, err := s.FindToolResult(t.Context(), p, "turn-x", "call-x")
	if err != nil {
		t.Fatal(err)
	}
	sameCard(t, "first result after failed puts", got, existingRes)
}

func testGetMany(t *testing.T, s cardstore.Store) {
	const p = "proj-getmany"
	c1, c2, c3 := NoteCard(p, "", "1"), NoteCard(p, "t", "2"), ToolCallCard(p, "t", "c")
	mustPut(t, s, c1, c2, c3)
	m1, m2 := card.NewID(), card.NewID()
	res, err := s.GetMany(t.Context(), p, []string{c3.CardID, m1, c1.CardID, c3.CardID, m1, m2, c2.CardID})
	if err != nil {
		t.Fatal(err)
	}
	sameCards(t, "get many", res.Cards, []*card.Card{c3, c1, c2})
	if strings.Join(res.Missing, ",") != m1+","+m2 {
		t.Errorf("missing = %v, want [%s %s] (request order, deduplicated)", res.Missing, m1, m2)
	}
	res, err = s.GetMany(t.Context(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cards) != 0 || len(res.Missing) != 0 {
		t.Errorf("get many of nothing = %v / %v, want nothing", ids(res.Cards), res.Missing)
	}
}

func testListTurn(t *testing.T, s cardstore.Store) {
	const p, turn = "proj-list", "turn-main"
	var want []*card.Card
	// The first put keeps its own order; other turns, projects and cards of
	// no turn are interleaved.
	first := []*card.Card{ToolCallCard(p, turn, "c0"), NoteCard(p, turn, "n0"), ToolResultCard(p, turn, "c0", card.StatusSuccess), NoteCard(p, turn, "n1"), NoteCard(p, turn, "n2")}
	mustPut(t, s, append([]*card.Card{NoteCard(p, "turn-other", "o")}, first...)...)
	want = append(want, first...)
	for i := range 10 {
		a, b := NoteCard(p, turn, "a"), NoteCard(p, turn, "b")
		mustPut(t, s, NoteCard(p, "", "none"), a, NoteCard(p, turn+"-2", "prefix"), b)
		mustPut(t, s, NoteCard("proj-list-other", turn, "same turn id, other project"))
		if i%3 == 0 {
			mustPut(t, s, NoteCard(p, "turn-other", "o"))
		}
		want = append(want, a, b)
	}
	all, err := cardstore.AllTurn(t.Context(), s, p, turn)
	if err != nil {
		t.Fatal(err)
	}
	sameCards(t, "whole turn", all, want)

	for _, limit := range []int{1, 5, 7, 25, 26} {
		var got []*card.Card
		req := cardstore.ListTurnRequest{ProjectID: p, AgentTurnID: turn, Limit: limit}
		for pages := 1; ; pages++ {
			page, err := s.ListTurn(t.Context(), req)
			if err != nil {
				t.Fatalf("limit %d, page %d: %v", limit, pages, err)
			}
			if len(page.Cards) > limit {
				t.Fatalf("limit %d, page %d: %d cards", limit, pages, len(page.Cards))
			}
			got = append(got, page.Cards...)
			if page.Next == 0 {
				if wantPages := (len(want) + limit - 1) / limit; pages != wantPages {
					t.Fatalf("limit %d: %d pages, want %d (Next must be 0 on the last page)", limit, pages, wantPages)
				}
				break
			}
			if len(page.Cards) != limit {
				t.Fatalf("limit %d, page %d: %d cards but Next %d: only the last page may be short", limit, pages, len(page.Cards), page.Next)
			}
			if pages > len(want) {
				t.Fatalf("limit %d: paging does not end", limit)
			}
			req.After = page.Next
		}
		sameCards(t, "paged turn", got, want)
	}
	page, err := s.ListTurn(t.Context(), cardstore.ListTurnRequest{ProjectID: p, AgentTurnID: turn, Limit: cardstore.MaxPage + 1})
	if err != nil {
		t.Fatalf("limit above MaxPage: %v", err)
	}
	sameCards(t, "limit above MaxPage", page.Cards, want)
	page, err = s.ListTurn(t.Context(), cardstore.ListTurnRequest{ProjectID: p, AgentTurnID: "turn-unknown"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Cards) != 0 || page.Next != 0 {
		t.Errorf("unknown turn: %v, next %d; want nothing", ids(page.Cards), page.Next)
	}
}

func testToolResult(t *testing.T, s cardstore.Store) {
	const p = "proj-result"
	call := ToolCallCard(p, "turn-1", "call-1")
	mustPut(t, s, call)
	_, err := s.FindToolResult(t.Context(), p, "turn-1", "call-1")
	wantErr(t, "result before it is written", err, cardstore.ErrNotFound)

	r1 := ToolResultCard(p, "turn-1", "call-1", card.StatusSuccess)
	mustPut(t, s, r1)
	mustPut(t, s, r1) // same result again: fine
	r2 := ToolResultCard(p, "turn-1", "call-1", card.StatusTimeout)
	err = s.Put(t.Context(), r2)
	wantErr(t, "second, different result", err, cardstore.ErrResultExists)
	if err != nil && !strings.Contains(err.Error(), r1.CardID) {
		t.Errorf("ErrResultExists message %q does not name the existing card %s", err, r1.CardID)
	}
	wantNotStored(t, "refused result", s, r2)
	r1b := clone(r1)
	r1b.Content = json.RawMessage(`{"status":"partial","after_execution":"terminate"}`)
	wantErr(t, "result id re-put with other bytes", s.Put(t.Context(), r1b), cardstore.ErrConflict)

	got, err := s.FindToolResult(t.Context(), p, "turn-1", "call-1")
	if err != nil {
		t.Fatal(err)
	}
	sameCard(t, "find tool result", got, r1)
	// Other calls and turns are separate.
	for _, k := range [][2]string{{"turn-1", "call-2"}, {"turn-2", "call-1"}} {
		_, err := s.FindToolResult(t.Context(), p, k[0], k[1])
		wantErr(t, "result of another call", err, cardstore.ErrNotFound)
		r := ToolResultCard(p, k[0], k[1], card.StatusSuccess)
		mustPut(t, s, r)
		got, err := s.FindToolResult(t.Context(), p, k[0], k[1])
		if err != nil {
			t.Fatal(err)
		}
		sameCard(t, "result of another call", got, r)
	}
}

func testInvalidCards(t *testing.T, s cardstore.Store) {
	const p = "proj-invalid"
	mod := func(base *card.Card, f func(c *card.Card)) *card.Card {
		c := clone(base)
		f(c)
		return c
	}
	call := ToolCallCard(p, "turn-1", "call-1")
	res := ToolResultCard(p, "turn-1", "call-1", card.StatusSuccess)
	note := NoteCard(p, "turn-1", "n")
	tests := []struct {
		name string
		c    *card.Card
	}{
		{"nil card", nil},
		{"missing project", mod(note, func(c *card.Card) { c.ProjectID = "" })},
		{"project with a space", mod(note, func(c *card.Card) { c.ProjectID = "my project" })},
		{"project with NUL", mod(note, func(c *card.Card) { c.ProjectID = "a\x00b" })},
		{"bad card_id", mod(note, func(c *card.Card) { c.CardID = "not-a-uuid" })},
		{"upper-case card_id", mod(note, func(c *card.Card) { c.CardID = strings.ToUpper(c.CardID) })},
		{"missing type", mod(note, func(c *card.Card) { c.Type = "" })},
		{"missing created_at", mod(note, func(c *card.Card) { c.CreatedAt = time.Time{} })},
		{"content not JSON", mod(note, func(c *card.Card) { c.Content = json.RawMessage(`{"a":`) })},
		{"tool.call without tool_call_id", mod(call, func(c *card.Card) { c.ToolCallID = ""; c.Metadata.ToolCallID = "" })},
		{"tool.call without agent_turn_id", mod(call, func(c *card.Card) { c.Metadata.AgentTurnID = "" })},
		{"tool.call without tool_name", mod(call, func(c *card.Card) { c.Content = json.RawMessage(`{"arguments":{}}`) })},
		{"tool.call with other metadata.tool_call_id", mod(call, func(c *card.Card) { c.Metadata.ToolCallID = "call-2" })},
		{"tool.result with bad status", mod(res, func(c *card.Card) {
			c.Content = json.RawMessage(`{"status":"done","after_execution":"suspend"}`)
		})},
		{"failed tool.result without error", mod(res, func(c *card.Card) {
			c.Content = json.RawMessage(`{"status":"failed","after_execution":"suspend"}`)
		})},
		{"tool.result without content", mod(res, func(c *card.Card) { c.Content = nil })},
	}
	for _, tc := range tests {
		err := s.Put(t.Context(), tc.c)
		wantErr(t, tc.name, err, cardstore.ErrInvalid)
		if tc.c != nil && card.ValidID(tc.c.CardID) && card.ValidateName("project_id", tc.c.ProjectID) == nil {
			wantNotStored(t, tc.name, s, tc.c)
		}
	}
	// One Put holds the cards of one project.
	a, b := NoteCard(p, "turn-1", "a"), NoteCard(p+"-other", "turn-1", "b")
	wantErr(t, "put mixing two projects", s.Put(t.Context(), a, b), cardstore.ErrInvalid)
	wantNotStored(t, "put mixing two projects", s, a, b)
}

func testTooLarge(t *testing.T, s cardstore.Store) {
	const p = "proj-large"
	big := NoteCard(p, "turn-1", strings.Repeat("x", cardstore.DefaultMaxCardBytes))
	err := s.Put(t.Context(), big)
	wantErr(t, "card above the size limit", err, cardstore.ErrTooLarge)
	if err != nil && !strings.Contains(err.Error(), big.CardID) {
		t.Errorf("ErrTooLarge message %q does not name card %s", err, big.CardID)
	}
	fits := NoteCard(p, "turn-1", strings.Repeat("x", cardstore.DefaultMaxCardBytes-1024))
	mustPut(t, s, fits)

	batch := make([]*card.Card, cardstore.MaxBatch+1)
	many := make([]string, cardstore.MaxBatch+1)
	for i := range batch {
		batch[i] = NoteCard(p, "turn-2", "n")
		many[i] = batch[i].CardID
	}
	wantErr(t, "put above MaxBatch", s.Put(t.Context(), batch...), cardstore.ErrTooLarge)
	wantNotStored(t, "put above MaxBatch", s, batch[0])
	_, err = s.GetMany(t.Context(), p, many)
	wantErr(t, "get many above MaxBatch", err, cardstore.ErrTooLarge)
	mustPut(t, s, batch[:cardstore.MaxBatch]...)
	res, err := s.GetMany(t.Context(), p, many[:cardstore.MaxBatch])
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cards) != cardstore.MaxBatch {
		t.Errorf("get many of MaxBatch cards: %d cards", len(res.Cards))
	}
	_, err = s.CreateBox(t.Context(), p, "", many)
	wantErr(t, "create box above MaxBatch", err, cardstore.ErrTooLarge)
}

// testInvalidArguments checks the arguments of the read, box and claim
// methods; malformed values are ErrInvalid, never a panic or "not found".
func testInvalidArguments(t *testing.T, s cardstore.Store) {
	const p = "proj-args"
	ctx := t.Context()
	id := card.NewID()
	long := strings.Repeat("k", cardstore.MaxKeyLen+1)
	claim := func(key, holder string, lease time.Duration) error {
		_, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: key, Holder: holder, Lease: lease})
		return err
	}
	errOf := func(_ any, err error) error { return err }
	tests := []struct {
		name string
		err  error
	}{
		{"get without project", errOf(s.Get(ctx, "", id))},
		{"get with bad project", errOf(s.Get(ctx, "a.b", id))},
		{"get with bad card id", errOf(s.Get(ctx, p, "123"))},
		{"get many with bad card id", errOf(s.GetMany(ctx, p, []string{id, "nope"}))},
		{"list turn without turn", errOf(s.ListTurn(ctx, cardstore.ListTurnRequest{ProjectID: p}))},
		{"list turn with bad project", errOf(s.ListTurn(ctx, cardstore.ListTurnRequest{ProjectID: "x y", AgentTurnID: "t"}))},
		{"find result without call", errOf(s.FindToolResult(ctx, p, "turn-1", ""))},
		{"find result without turn", errOf(s.FindToolResult(ctx, p, "", "call-1"))},
		{"create box with bad id", errOf(s.CreateBox(ctx, p, "box 1", nil))},
		{"create box with bad card id", errOf(s.CreateBox(ctx, p, "", []string{"x"}))},
		{"append box with bad id", errOf(s.AppendBox(ctx, p, "", []string{id}))},
		{"get box with bad id", errOf(s.GetBox(ctx, p, "box\n"))},
		{"claim without key", claim("", "h", time.Minute)},
		{"claim without holder", claim("k", "", time.Minute)},
		{"claim with long key", claim(long, "h", time.Minute)},
		{"claim with long holder", claim("k", long, time.Minute)},
		{"claim with short lease", claim("k", "h", cardstore.MinLease-time.Millisecond)},
		{"claim with long lease", claim("k", "h", cardstore.MaxLease+time.Second)},
		{"claim with bad project", errOf(s.Claim(ctx, cardstore.ClaimRequest{Key: "k", Holder: "h", Lease: time.Minute}))},
		{"release without holder", s.Release(ctx, p, "k", "")},
		{"release with long key", s.Release(ctx, p, long, "h")},
		{"get claim without key", errOf(s.GetClaim(ctx, p, ""))},
		{"get claim with long key", errOf(s.GetClaim(ctx, p, long))},
		{"get claim with bad project", errOf(s.GetClaim(ctx, "a b", "k"))},
	}
	for _, tc := range tests {
		if !errors.Is(tc.err, cardstore.ErrInvalid) {
			t.Errorf("%s: got error %v, want one wrapping ErrInvalid", tc.name, tc.err)
		}
	}
}
