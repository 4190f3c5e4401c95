package boltstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/subjects"
)

// entryHook is a ResultHook that stores an "entry" for every result but
// those of calls named no-entry-…, for which it returns no after (as
// boltinbox's hook does for a result the inbox makes no entry for).
type entryHook struct{}

func (entryHook) ResultStored(_ *bolt.Tx, result, _ *card.Card, _ []byte) (func(), error) {
	if strings.HasPrefix(result.ToolCallID, "no-entry") {
		return nil, nil
	}
	return func() {}, nil
}

var (
	_ cardstore.EntryPutter = (*boltstore.Store)(nil)
	_ boltstore.ResultHook  = entryHook{}
)

// TestPutWithEntry: PutWithEntry says true only when the hook stored the
// entry of every tool.result card of the Put, each new; a repeat, a
// second result, a result the hook made no entry for, a Put of no result
// and a store without a hook say false (the worker then reports).
func TestPutWithEntry(t *testing.T) {
	ctx := t.Context()
	obs := &commits{}
	s, _ := openSharedStore(t, entryHook{}, obs)
	first := storetest.ToolResultCard("p", "turn-1", "call-1", card.StatusSuccess)
	for _, tc := range []struct {
		name  string
		cards []*card.Card
		want  bool
		err   error
	}{
		{"new result", []*card.Card{first}, true, nil},
		{"the same result again", []*card.Card{first}, false, nil},
		{"a second result of the call", []*card.Card{storetest.ToolResultCard("p", "turn-1", "call-1", card.StatusFailed)}, false, cardstore.ErrResultExists},
		{"a result the hook makes no entry for", []*card.Card{storetest.ToolResultCard("p", "turn-1", "no-entry-1", card.StatusSuccess)}, false, nil},
		{"a result and a note", []*card.Card{storetest.ToolResultCard("p", "turn-1", "call-2", card.StatusSuccess), storetest.NoteCard("p", "turn-1", "done")}, true, nil},
		{"no result", []*card.Card{storetest.NoteCard("p", "turn-1", "thinking")}, false, nil},
		{"two results, one without an entry", []*card.Card{
			storetest.ToolResultCard("p", "turn-1", "call-3", card.StatusSuccess),
			storetest.ToolResultCard("p", "turn-1", "no-entry-2", card.StatusSuccess),
		}, false, nil},
		{"a new result and a stored one", []*card.Card{storetest.ToolResultCard("p", "turn-1", "call-4", card.StatusSuccess), first}, false, nil},
		{"no cards", nil, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.PutWithEntry(ctx, tc.cards...)
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("PutWithEntry: %v, want %v", err, tc.err)
			}
			if got != tc.want {
				t.Fatalf("PutWithEntry = %v, want %v", got, tc.want)
			}
		})
	}

	// Without a hook the store never says so.
	plain, _ := openStore(t)
	if got, err := plain.PutWithEntry(ctx, storetest.ToolResultCard("p", "turn-1", "call-1", card.StatusSuccess)); err != nil || got {
		t.Fatalf("PutWithEntry without a hook = %v, %v; want false", got, err)
	}
}

// TestPutToolResultEntry: a worker's result under its claim says true
// when the hook stored its entry, false for one it made no entry for; a
// refused result says false with its error.
func TestPutToolResultEntry(t *testing.T) {
	ctx := t.Context()
	obs := &commits{}
	s, _ := openSharedStore(t, entryHook{}, obs)
	weather := subjects.ToolToken("weather.get")
	for _, tc := range []struct {
		call   string
		holder string
		want   bool
		err    error
	}{
		{"call-1", "w1", true, nil},
		{"no-entry-1", "w1", false, nil},
		{"call-2", "someone-else", false, cardstore.ErrClaimLost},
	} {
		t.Run(tc.call, func(t *testing.T) {
			if err := s.Put(ctx, storetest.ToolCallCard("p", "turn-1", tc.call)); err != nil {
				t.Fatal(err)
			}
			st, err := s.StartCallTool(ctx, cardstore.StartCallRequest{ProjectID: "p", AgentTurnID: "turn-1", ToolCallID: tc.call, Holder: "w1", Lease: time.Minute}, weather)
			if err != nil || st.Claim == nil {
				t.Fatalf("start: %+v, %v", st, err)
			}
			got, err := s.PutToolResultEntry(ctx, weather, tc.holder, st.Claim.Token, storetest.ToolResultCard("p", "turn-1", tc.call, card.StatusSuccess))
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("PutToolResultEntry: %v, want %v", err, tc.err)
			}
			if got != tc.want {
				t.Fatalf("PutToolResultEntry = %v, want %v", got, tc.want)
			}
		})
	}
}
