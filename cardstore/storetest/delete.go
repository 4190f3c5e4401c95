package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// testDeleteTurn: DeleteTurn removes exactly the turn's cards, result
// index, summary and claim tombstones, in its project only; a live claim
// keeps the turn whole; a second delete and an unknown turn remove
// nothing without an error.
func testDeleteTurn(t *testing.T, s cardstore.Store) {
	ctx := t.Context()
	const p, other = "p-del", "p-other"
	callA, resA, noteA := ToolCallCard(p, "turn-a", "c1"), ToolResultCard(p, "turn-a", "c1", card.StatusSuccess), NoteCard(p, "turn-a", "thinking")
	callB, resB := ToolCallCard(p, "turn-b", "c1"), ToolResultCard(p, "turn-b", "c1", card.StatusSuccess)
	callC := ToolCallCard(p, "turn-c", "c1")
	otherA := ToolCallCard(other, "turn-a", "c1")
	loose := NoteCard(p, "", "no turn")
	mustPut(t, s, callA, noteA)
	if _, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: cardstore.CallKey{AgentTurnID: "turn-a", ToolCallID: "c1"}.String(), Holder: "w1", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, resA) // ends the claim: a tombstone stays
	mustPut(t, s, callB, resB)
	mustPut(t, s, callC, loose)
	mustPut(t, s, otherA)
	box, err := s.CreateBox(ctx, p, "", []string{callA.CardID, callB.CardID})
	if err != nil {
		t.Fatal(err)
	}

	// A turn's summary counts its cards' bytes (retention's size limit).
	all := listAllTurns(t, s, cardstore.ListTurnsRequest{ProjectID: p})
	wantBytes := int64(len(encode(t, callB)) + len(encode(t, resB)))
	for _, ti := range all {
		if ti.AgentTurnID == "turn-b" && ti.Bytes != wantBytes {
			t.Fatalf("turn-b's summary counts %d bytes, want %d (its two cards' canonical encodings)", ti.Bytes, wantBytes)
		}
	}

	n, err := s.DeleteTurn(ctx, p, "turn-a")
	if err != nil {
		t.Fatalf("delete turn-a: %v", err)
	}
	if n != 3 {
		t.Fatalf("delete turn-a removed %d cards, want 3", n)
	}
	for _, c := range []*card.Card{callA, resA, noteA} {
		if _, err := s.Get(ctx, p, c.CardID); !errors.Is(err, cardstore.ErrNotFound) {
			t.Fatalf("get %s of the deleted turn: got %v, want ErrNotFound", c.CardID, err)
		}
	}
	if cards, err := cardstore.AllTurn(ctx, s, p, "turn-a"); err != nil || len(cards) != 0 {
		t.Fatalf("list the deleted turn: got %v, %v; want no cards", ids(cards), err)
	}
	if _, err := s.FindToolResult(ctx, p, "turn-a", "c1"); !errors.Is(err, cardstore.ErrNotFound) {
		t.Fatalf("find the deleted turn's result: got %v, want ErrNotFound", err)
	}
	// The claim tombstone went too: the next claim of the key is a first one.
	cl, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: cardstore.CallKey{AgentTurnID: "turn-a", ToolCallID: "c1"}.String(), Holder: "w2", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if cl.Token != 1 || cl.TakenOver {
		t.Fatalf("claim after delete: token %d, taken over %v; want token 1 (the tombstone deleted)", cl.Token, cl.TakenOver)
	}
	if err := s.Release(ctx, p, cl.Key, "w2"); err != nil {
		t.Fatal(err)
	}
	// Everything else is kept.
	for _, c := range []*card.Card{callB, resB, callC, loose} {
		got, err := s.Get(ctx, p, c.CardID)
		if err != nil {
			t.Fatalf("get kept card %s: %v", c.CardID, err)
		}
		sameCard(t, "kept card", got, c)
	}
	if _, err := s.Get(ctx, other, otherA.CardID); err != nil {
		t.Fatalf("the same turn id in another project: %v", err)
	}
	if _, err := s.FindToolResult(ctx, p, "turn-b", "c1"); err != nil {
		t.Fatalf("find a kept turn's result: %v", err)
	}
	if got, err := s.GetBox(ctx, p, box.BoxID); err != nil || len(got.CardIDs) != 2 {
		t.Fatalf("box after delete: %+v, %v; want it kept as it was", got, err)
	}
	sameTurnIDs(t, "turns after delete", listAllTurns(t, s, cardstore.ListTurnsRequest{ProjectID: p, Limit: 1}), "turn-c", "turn-b")
	sameTurnIDs(t, "agent-1's turns after delete", listAllTurns(t, s, cardstore.ListTurnsRequest{ProjectID: p, AgentID: "agent-1", Limit: 1}), "turn-c", "turn-b")
	sameTurnIDs(t, "other project's turns", listAllTurns(t, s, cardstore.ListTurnsRequest{ProjectID: other}), "turn-a")

	// Again, and a turn that never was: nothing to remove, no error.
	for _, turn := range []string{"turn-a", "turn-never"} {
		if n, err := s.DeleteTurn(ctx, p, turn); err != nil || n != 0 {
			t.Fatalf("delete %s: got %d, %v; want 0, nil", turn, n, err)
		}
	}

	// A call with a live claim keeps its turn whole.
	if _, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: cardstore.CallKey{AgentTurnID: "turn-c", ToolCallID: "c1"}.String(), Holder: "w1", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	_, err = s.DeleteTurn(ctx, p, "turn-c")
	wantErr(t, "delete a turn with a running call", err, cardstore.ErrClaimHeld)
	if _, err := s.Get(ctx, p, callC.CardID); err != nil {
		t.Fatalf("the refused delete removed card %s: %v", callC.CardID, err)
	}
	mustPut(t, s, ToolResultCard(p, "turn-c", "c1", card.StatusSuccess))
	if n, err := s.DeleteTurn(ctx, p, "turn-c"); err != nil || n != 2 {
		t.Fatalf("delete turn-c once its call ended: got %d, %v; want 2, nil", n, err)
	}
	sameTurnIDs(t, "turns at the end", listAllTurns(t, s, cardstore.ListTurnsRequest{ProjectID: p}), "turn-b")

	// Bad arguments name what is wrong.
	for _, tc := range []struct{ project, turn string }{{"", "turn-b"}, {p, ""}, {"bad project", "turn-b"}} {
		_, err := s.DeleteTurn(ctx, tc.project, tc.turn)
		wantErr(t, "delete turn "+tc.project+"/"+tc.turn, err, cardstore.ErrInvalid)
	}
}
