package storetest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// wantBox fails unless box has the given identity and card ids.
func wantBox(t *testing.T, what string, box *card.Box, projectID, boxID string, cardIDs []string) {
	t.Helper()
	if box == nil {
		t.Fatalf("%s: no box", what)
	}
	if box.ProjectID != projectID || box.BoxID != boxID {
		t.Fatalf("%s: box %s/%s, want %s/%s", what, box.ProjectID, box.BoxID, projectID, boxID)
	}
	if !slices.Equal(box.CardIDs, cardIDs) {
		t.Fatalf("%s: card ids %v, want %v", what, box.CardIDs, cardIDs)
	}
	if box.CreatedAt.IsZero() || box.UpdatedAt.IsZero() {
		t.Fatalf("%s: created_at %v, updated_at %v: both must be set", what, box.CreatedAt, box.UpdatedAt)
	}
}

func testBoxes(t *testing.T, s cardstore.Store) {
	const p = "proj-boxes"
	ctx := t.Context()
	c1, c2, c3 := NoteCard(p, "", "1"), NoteCard(p, "", "2"), NoteCard(p, "", "3")
	mustPut(t, s, c1, c2, c3)

	box, err := s.CreateBox(ctx, p, "box-1", []string{c1.CardID, c2.CardID})
	if err != nil {
		t.Fatal(err)
	}
	wantBox(t, "created box", box, p, "box-1", []string{c1.CardID, c2.CardID})
	got, err := s.GetBox(ctx, p, "box-1")
	if err != nil {
		t.Fatal(err)
	}
	wantBox(t, "get box", got, p, "box-1", []string{c1.CardID, c2.CardID})
	if !got.CreatedAt.Equal(box.CreatedAt) || !got.UpdatedAt.Equal(box.UpdatedAt) {
		t.Errorf("get box times %v/%v, create returned %v/%v", got.CreatedAt, got.UpdatedAt, box.CreatedAt, box.UpdatedAt)
	}

	box, err = s.AppendBox(ctx, p, "box-1", []string{c3.CardID, c1.CardID})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{c1.CardID, c2.CardID, c3.CardID, c1.CardID}
	wantBox(t, "appended box", box, p, "box-1", want)
	got, err = s.GetBox(ctx, p, "box-1")
	if err != nil {
		t.Fatal(err)
	}
	wantBox(t, "get appended box", got, p, "box-1", want)
	if !got.CreatedAt.Equal(box.CreatedAt) {
		t.Errorf("append changed created_at from %v to %v", box.CreatedAt, got.CreatedAt)
	}

	_, err = s.CreateBox(ctx, p, "box-1", []string{c3.CardID})
	wantErr(t, "create an existing box", err, cardstore.ErrConflict)
	missing := card.NewID()
	_, err = s.CreateBox(ctx, p, "box-2", []string{c1.CardID, missing})
	wantErr(t, "create a box with a missing card", err, cardstore.ErrNotFound)
	if err != nil && !errorNames(err, missing) {
		t.Errorf("error %q does not name the missing card %s", err, missing)
	}
	_, err = s.GetBox(ctx, p, "box-2")
	wantErr(t, "box whose creation failed", err, cardstore.ErrNotFound)
	_, err = s.AppendBox(ctx, p, "box-1", []string{c2.CardID, missing})
	wantErr(t, "append a missing card", err, cardstore.ErrNotFound)
	got, err = s.GetBox(ctx, p, "box-1")
	if err != nil {
		t.Fatal(err)
	}
	wantBox(t, "box after a failed append", got, p, "box-1", want)
	_, err = s.AppendBox(ctx, p, "box-none", []string{c1.CardID})
	wantErr(t, "append to a missing box", err, cardstore.ErrNotFound)
	_, err = s.GetBox(ctx, p, "box-none")
	wantErr(t, "get a missing box", err, cardstore.ErrNotFound)

	auto, err := s.CreateBox(ctx, p, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !card.ValidID(auto.BoxID) {
		t.Errorf("box created without id got id %q, want a UUID", auto.BoxID)
	}
	got, err = s.GetBox(ctx, p, auto.BoxID)
	if err != nil {
		t.Fatal(err)
	}
	wantBox(t, "empty box", got, p, auto.BoxID, []string{})
}

func testBoxTooManyCards(t *testing.T, s cardstore.Store) {
	const p = "proj-bigbox"
	ctx := t.Context()
	c := NoteCard(p, "", "x")
	mustPut(t, s, c)
	full := make([]string, cardstore.MaxBatch)
	for i := range full {
		full[i] = c.CardID // a card may appear more than once
	}
	if _, err := s.CreateBox(ctx, p, "big", full); err != nil {
		t.Fatal(err)
	}
	n := cardstore.MaxBatch
	for n+cardstore.MaxBatch <= cardstore.MaxBoxCards {
		if _, err := s.AppendBox(ctx, p, "big", full); err != nil {
			t.Fatalf("append at %d cards: %v", n, err)
		}
		n += cardstore.MaxBatch
	}
	rest := cardstore.MaxBoxCards - n
	_, err := s.AppendBox(ctx, p, "big", full[:rest+1])
	wantErr(t, "append beyond MaxBoxCards", err, cardstore.ErrTooLarge)
	box, err := s.AppendBox(ctx, p, "big", full[:rest])
	if err != nil {
		t.Fatalf("append up to exactly MaxBoxCards: %v", err)
	}
	if len(box.CardIDs) != cardstore.MaxBoxCards {
		t.Fatalf("full box holds %d cards, want %d", len(box.CardIDs), cardstore.MaxBoxCards)
	}
	_, err = s.AppendBox(ctx, p, "big", full[:1])
	wantErr(t, "append to a full box", err, cardstore.ErrTooLarge)
}

// errorNames reports whether the error message mentions s.
func errorNames(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}

func testProjectIsolation(t *testing.T, s cardstore.Store) {
	const a, b = "proj-a", "proj-b"
	ctx := t.Context()
	call := ToolCallCard(a, "turn-1", "call-1")
	res := ToolResultCard(a, "turn-1", "call-1", card.StatusSuccess)
	mustPut(t, s, call, res)
	if _, err := s.CreateBox(ctx, a, "box-a", []string{call.CardID}); err != nil {
		t.Fatal(err)
	}

	_, err := s.Get(ctx, b, call.CardID)
	wantErr(t, "get a card of another project", err, cardstore.ErrNotFound)
	many, err := s.GetMany(ctx, b, []string{call.CardID, res.CardID})
	if err != nil {
		t.Fatal(err)
	}
	if len(many.Cards) != 0 || len(many.Missing) != 2 {
		t.Errorf("get many of another project's cards: found %v, missing %v", ids(many.Cards), many.Missing)
	}
	page, err := s.ListTurn(ctx, cardstore.ListTurnRequest{ProjectID: b, AgentTurnID: "turn-1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Cards) != 0 {
		t.Errorf("list turn of another project: %v", ids(page.Cards))
	}
	_, err = s.FindToolResult(ctx, b, "turn-1", "call-1")
	wantErr(t, "find a result of another project", err, cardstore.ErrNotFound)
	_, err = s.GetBox(ctx, b, "box-a")
	wantErr(t, "get a box of another project", err, cardstore.ErrNotFound)
	_, err = s.AppendBox(ctx, b, "box-a", []string{call.CardID})
	wantErr(t, "append to a box of another project", err, cardstore.ErrNotFound)
	_, err = s.CreateBox(ctx, b, "box-b", []string{call.CardID})
	wantErr(t, "create a box of another project's card", err, cardstore.ErrNotFound)
	if _, err := s.CreateBox(ctx, b, "box-b", nil); err != nil {
		t.Fatal(err)
	}
	_, err = s.AppendBox(ctx, b, "box-b", []string{call.CardID})
	wantErr(t, "append another project's card", err, cardstore.ErrNotFound)
	if _, err := s.CreateBox(ctx, b, "box-a", nil); err != nil {
		t.Errorf("box id used in another project: %v", err)
	}

	// The same ids in project b are different cards and results.
	callB := clone(call)
	callB.ProjectID = b
	resB := ToolResultCard(b, "turn-1", "call-1", card.StatusFailed)
	mustPut(t, s, callB, resB)
	got, err := s.Get(ctx, a, call.CardID)
	if err != nil {
		t.Fatal(err)
	}
	sameCard(t, "card of project a after b reused its id", got, call)
	got, err = s.Get(ctx, b, call.CardID)
	if err != nil {
		t.Fatal(err)
	}
	sameCard(t, "card of project b with a's id", got, callB)
	got, err = s.FindToolResult(ctx, b, "turn-1", "call-1")
	if err != nil {
		t.Fatal(err)
	}
	sameCard(t, "result of project b", got, resB)
	all, err := cardstore.AllTurn(ctx, s, a, "turn-1")
	if err != nil {
		t.Fatal(err)
	}
	sameCards(t, "turn of project a", all, []*card.Card{call, res})

	// Claims on the same key in two projects are independent.
	key := cardstore.CallKey{AgentTurnID: "turn-1", ToolCallID: "call-1"}.String()
	ca, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: a, Key: key, Holder: "w1", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: b, Key: key, Holder: "w2", Lease: time.Minute})
	if err != nil {
		t.Fatalf("claim of a key held in another project: %v", err)
	}
	if ca.Token != 1 || cb.Token != 1 || cb.TakenOver {
		t.Errorf("tokens %d and %d (taken over %v), want 1 and 1", ca.Token, cb.Token, cb.TakenOver)
	}
	wantErr(t, "release in b by a's holder", s.Release(ctx, b, key, "w1"), cardstore.ErrClaimLost)
	wantErr(t, "release in a by b's holder", s.Release(ctx, a, key, "w2"), cardstore.ErrClaimLost)
	if err := s.Release(ctx, a, key, "w1"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Claim(ctx, cardstore.ClaimRequest{ProjectID: b, Key: key, Holder: "w3", Lease: time.Minute})
	wantErr(t, "b's claim after a released its own", err, cardstore.ErrClaimHeld)
}

// testContext checks that every method fails with the context's error when
// it is already canceled.
func testContext(t *testing.T, s cardstore.Store) {
	const p = "proj-ctx"
	c := NoteCard(p, "turn-1", "x")
	mustPut(t, s, c)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	errOf := func(_ any, err error) error { return err }
	tests := []struct {
		name string
		err  error
	}{
		{"Put", s.Put(ctx, NoteCard(p, "turn-1", "y"))},
		{"Get", errOf(s.Get(ctx, p, c.CardID))},
		{"GetMany", errOf(s.GetMany(ctx, p, []string{c.CardID}))},
		{"ListTurn", errOf(s.ListTurn(ctx, cardstore.ListTurnRequest{ProjectID: p, AgentTurnID: "turn-1"}))},
		{"FindToolResult", errOf(s.FindToolResult(ctx, p, "turn-1", "call-1"))},
		{"CreateBox", errOf(s.CreateBox(ctx, p, "box", []string{c.CardID}))},
		{"AppendBox", errOf(s.AppendBox(ctx, p, "box", []string{c.CardID}))},
		{"GetBox", errOf(s.GetBox(ctx, p, "box"))},
		{"Claim", errOf(s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: "k", Holder: "h", Lease: time.Minute}))},
		{"Release", s.Release(ctx, p, "k", "h")},
		{"StartCall", errOf(s.StartCall(cardstore.WithTool(ctx, toolName), cardstore.StartCallRequest{
			ProjectID: p, AgentTurnID: "turn-1", ToolCallID: "call-1", Holder: "h", Lease: time.Minute}))},
	}
	for _, tc := range tests {
		if !errors.Is(tc.err, context.Canceled) {
			t.Errorf("%s with a canceled context: got %v, want context.Canceled", tc.name, tc.err)
		}
	}
	all, err := cardstore.AllTurn(t.Context(), s, p, "turn-1")
	if err != nil {
		t.Fatal(err)
	}
	sameCards(t, "turn after canceled put", all, []*card.Card{c})
	_, err = s.GetBox(t.Context(), p, "box")
	wantErr(t, "box of a canceled create", err, cardstore.ErrNotFound)
}
