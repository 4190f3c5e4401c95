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

func TestFindToolCall(t *testing.T) {
	st, _ := openStore(t)
	ctx := context.Background()
	first := storetest.ToolCallCard("p", "turn", "c1")
	if err := st.Put(ctx, first, storetest.ToolCallCard("p", "turn", "c2"), storetest.NoteCard("p", "turn", "x")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		turn, call string
		want       string
		err        error
	}{
		{"turn", "c1", first.CardID, nil},
		{"turn", "c3", "", cardstore.ErrNotFound},
		{"other", "c1", "", cardstore.ErrNotFound},
		{"", "c1", "", cardstore.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.turn+"/"+tc.call, func(t *testing.T) {
			c, err := st.FindToolCall(ctx, "p", tc.turn, tc.call)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("FindToolCall = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || c.CardID != tc.want {
				t.Fatalf("FindToolCall = %v, %v; want card %s", c, err, tc.want)
			}
		})
	}
}

// BenchmarkFindToolCall is the CardStore's extra read per tool-scoped
// claim and put_result: the call card of a turn of 20 calls (40 cards),
// the newest call and the oldest.
//
//	go test -run '^$' -bench BenchmarkFindToolCall ./cardstore/boltstore/
func BenchmarkFindToolCall(b *testing.B) {
	st, _ := openStore(b)
	ctx := context.Background()
	var cards []*card.Card
	for i := 0; i < 20; i++ {
		cards = append(cards, storetest.ToolCallCard("p", "turn", fmt.Sprintf("c%d", i)), storetest.NoteCard("p", "turn", "thinking"))
	}
	if err := st.Put(ctx, cards...); err != nil {
		b.Fatal(err)
	}
	for _, call := range []string{"c19", "c0"} {
		b.Run(call, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := st.FindToolCall(ctx, "p", "turn", call); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestToolsConformance runs the tool-scoped conformance suite, which
// cardstore/jsstore runs too: both stores apply the same rules with the
// same errors.
func TestToolsConformance(t *testing.T) {
	storetest.RunTools(t, func(t *testing.T) storetest.ToolStore {
		st, _ := openStore(t)
		return st
	})
}
