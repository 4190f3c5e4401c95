package boltstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// TestListTurnJSON checks that ListTurnJSON hands out exactly ListTurn's
// pages, as the stored canonical bytes, with the same cursors.
func TestListTurnJSON(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	for i := range 7 {
		if err := s.Put(ctx, storetest.ToolCallCard("p", "t", fmt.Sprint(i)), storetest.NoteCard("p", "other", "x")); err != nil {
			t.Fatal(err)
		}
	}
	for _, limit := range []int{0, 1, 3, 7, 8} {
		req := cardstore.ListTurnRequest{ProjectID: "p", AgentTurnID: "t", Limit: limit}
		for page := 0; ; page++ {
			want, err := s.ListTurn(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			got, next, err := s.ListTurnJSON(ctx, req, []byte("prefix:"))
			if err != nil {
				t.Fatal(err)
			}
			cards, n, err := card.ParseList(got[len("prefix:"):])
			if err != nil || n != len(got)-len("prefix:") {
				t.Fatalf("limit %d page %d: %q is not one JSON array of cards (%v)", limit, page, got, err)
			}
			if next != want.Next || len(cards) != len(want.Cards) {
				t.Fatalf("limit %d page %d: next %d, %d cards; ListTurn: next %d, %d cards", limit, page, next, len(cards), want.Next, len(want.Cards))
			}
			for i := range cards {
				a, _ := card.Encode(cards[i])
				b, _ := card.Encode(want.Cards[i])
				if string(a) != string(b) {
					t.Fatalf("limit %d page %d card %d: %s, want %s", limit, page, i, a, b)
				}
			}
			if next == 0 {
				break
			}
			req.After = next
		}
	}
	if _, _, err := s.ListTurnJSON(ctx, cardstore.ListTurnRequest{ProjectID: "p", AgentTurnID: "t", Limit: -1}, nil); err == nil {
		t.Error("a negative limit was accepted")
	}
	if got, next, err := s.ListTurnJSON(ctx, cardstore.ListTurnRequest{ProjectID: "p", AgentTurnID: "none"}, nil); err != nil || string(got) != "[]" || next != 0 {
		t.Errorf("an unknown turn: %q, %d, %v; want [], 0, nil", got, next, err)
	}
}

// TestGetJSON checks that GetJSON hands out the card Get returns, as its
// stored bytes, and Get's errors.
func TestGetJSON(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	c := storetest.ToolCallCard("p", "t", "1")
	if err := s.Put(ctx, c); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetJSON(ctx, "p", c.CardID, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := card.Encode(c)
	if string(got) != "x"+string(want) {
		t.Errorf("GetJSON: %s, want x%s", got, want)
	}
	if _, err := s.GetJSON(ctx, "other", c.CardID, nil); !errors.Is(err, cardstore.ErrNotFound) {
		t.Errorf("another project's card: %v, want ErrNotFound", err)
	}
	if _, err := s.GetJSON(ctx, "p", "not-a-uuid", nil); !errors.Is(err, cardstore.ErrInvalid) {
		t.Errorf("a bad id: %v, want ErrInvalid", err)
	}
}
