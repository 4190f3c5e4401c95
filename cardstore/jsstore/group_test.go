package jsstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/jsstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// waitQueued waits until n Puts wait for the committer.
func waitQueued(t *testing.T, s *jsstore.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for jsstore.Queued(s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d Puts queued within 30s, want %d", jsstore.Queued(s), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGroupCommit: Puts that queue behind a batch are committed together,
// each on its own terms: one that conflicts fails alone, and one whose
// context ended while it waited is skipped and stores nothing.
func TestGroupCommit(t *testing.T) {
	ns := startServer(t, "")
	s := open(t, connect(t, ns), jsstore.Config{})
	ctx := t.Context()
	const p = "proj-group"
	stored := storetest.NoteCard(p, "turn-1", "stored")
	if err := s.Put(ctx, stored); err != nil {
		t.Fatal(err)
	}
	conflicting := *stored
	conflicting.Content = json.RawMessage(`{"text":"other"}`)
	a, c := storetest.ToolCallCard(p, "turn-1", "call-a"), storetest.ToolCallCard(p, "turn-2", "call-c")
	late := storetest.NoteCard(p, "turn-1", "late")
	canceled, cancel := context.WithCancel(ctx)

	jsstore.HoldCommitter(s)
	errs := make([]error, 4)
	done := make(chan int, 4)
	for i, put := range []struct {
		ctx  context.Context
		card *card.Card
	}{{ctx, a}, {ctx, &conflicting}, {canceled, late}, {ctx, c}} {
		go func() {
			errs[i] = s.Put(put.ctx, put.card)
			done <- i
		}()
		waitQueued(t, s, i+1) // queue in this order
	}
	cancel()
	jsstore.ReleaseCommitter(s)
	for range 4 {
		<-done
	}
	if errs[0] != nil || errs[3] != nil {
		t.Fatalf("puts queued beside a failing one: %v, %v; want both stored", errs[0], errs[3])
	}
	if !errors.Is(errs[1], cardstore.ErrConflict) {
		t.Fatalf("conflicting put in a group: %v, want ErrConflict", errs[1])
	}
	if !errors.Is(errs[2], context.Canceled) {
		t.Fatalf("put whose context ended while queued: %v, want context.Canceled", errs[2])
	}
	if _, err := s.Get(ctx, p, late.CardID); !errors.Is(err, cardstore.ErrNotFound) {
		t.Fatalf("card of the skipped put: %v, want ErrNotFound", err)
	}
	all, err := cardstore.AllTurn(ctx, s, p, "turn-1")
	if err != nil || len(all) != 2 || all[0].CardID != stored.CardID || all[1].CardID != a.CardID {
		t.Fatalf("turn-1 after the group: %v, %v; want the stored card and a", ids(all), err)
	}
	turns := listTurns(t, s, p)
	if len(turns) != 2 || turns[0].AgentTurnID != "turn-2" || turns[1].Cards != 2 {
		t.Fatalf("turns after the group: %+v", turns)
	}
}

// TestAgentListOrder shows the documented caveat of the agent filter: a
// turn whose first cards named no agent is listed for its agent where a
// later card named it, while the unfiltered list keeps every turn at its
// first card.
func TestAgentListOrder(t *testing.T) {
	ns := startServer(t, "")
	s := open(t, connect(t, ns), jsstore.Config{})
	ctx := t.Context()
	const p = "proj-agents"
	x := storetest.NoteCard(p, "turn-x", "no agent yet")
	y := storetest.ToolCallCard(p, "turn-y", "c") // agent-1
	xLater := storetest.ToolCallCard(p, "turn-x", "c")
	for _, c := range []*card.Card{x, y, xLater} {
		if err := s.Put(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	order := func(req cardstore.ListTurnsRequest) string {
		page, err := s.ListTurns(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ti := range page.Turns {
			out = append(out, ti.AgentTurnID)
		}
		return strings.Join(out, ",")
	}
	if got := order(cardstore.ListTurnsRequest{ProjectID: p}); got != "turn-y,turn-x" {
		t.Fatalf("all turns: %s, want turn-y,turn-x (by first card)", got)
	}
	if got := order(cardstore.ListTurnsRequest{ProjectID: p, AgentID: "agent-1"}); got != "turn-x,turn-y" {
		t.Fatalf("turns of agent-1: %s, want turn-x,turn-y (by the put that named the agent)", got)
	}
}

// TestPutBytesLimit: a Put whose cards add up to more than MaxPutBytes
// fails with ErrTooLarge and stores nothing.
func TestPutBytesLimit(t *testing.T) {
	ns := startServer(t, "")
	s := open(t, connect(t, ns), jsstore.Config{})
	const p = "proj-bytes"
	text := strings.Repeat("x", cardstore.DefaultMaxCardBytes-1024)
	cards := make([]*card.Card, jsstore.MaxPutBytes/len(text)+1)
	for i := range cards {
		cards[i] = storetest.NoteCard(p, "", text)
	}
	err := s.Put(t.Context(), cards...)
	if !errors.Is(err, cardstore.ErrTooLarge) {
		t.Fatalf("put of %d cards of %d bytes: %v, want ErrTooLarge", len(cards), len(text), err)
	}
	if _, err := s.Get(t.Context(), p, cards[0].CardID); !errors.Is(err, cardstore.ErrNotFound) {
		t.Fatalf("card of the refused put: %v, want ErrNotFound", err)
	}
}
