// Package storetest is the conformance suite of cardstore.Store: the one set
// of tests that every implementation (cardstore/boltstore,
// cardstore/jsstore, the cardstore/natsstore client) must pass, so that
// code using a Store cannot tell them apart.
//
// An implementation's test calls Run with a factory:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) cardstore.Store {
//			s, err := boltstore.Open(filepath.Join(t.TempDir(), "cards.db"))
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() }) // plus any consistency check
//			return s
//		})
//	}
//
// The suite uses only the Store interface and assumes the default limits
// (cardstore.DefaultMaxCardBytes and friends). Subtests run in parallel,
// each with a store of its own, so the factory must be safe to call from
// several goroutines. Nothing in the suite asserts on elapsed time: lease
// expiry is awaited by polling with a generous deadline.
package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// Run runs the conformance suite. newStore must return a fresh, empty store
// and register its own cleanup (close, and any consistency check) on the t
// it is given.
func Run(t *testing.T, newStore func(t *testing.T) cardstore.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s cardstore.Store)
	}{
		{"PutGet", testPutGet},
		{"CanonicalBytes", testCanonicalBytes},
		{"IdempotentRePut", testIdempotentRePut},
		{"Conflict", testConflict},
		{"Atomicity", testAtomicity},
		{"ProjectIsolation", testProjectIsolation},
		{"GetMany", testGetMany},
		{"ListTurn", testListTurn},
		{"ToolResult", testToolResult},
		{"InvalidCards", testInvalidCards},
		{"InvalidUTF8", testInvalidUTF8},
		{"InvalidArguments", testInvalidArguments},
		{"TooLarge", testTooLarge},
		{"Boxes", testBoxes},
		{"BoxTooManyCards", testBoxTooManyCards},
		{"Claims", testClaims},
		{"ClaimTakeOver", testClaimTakeOver},
		{"GetClaim", testGetClaim},
		{"ResultReleasesClaim", testResultReleasesClaim},
		{"StartCall", testStartCall},
		{"StartCallInvalid", testStartCallInvalid},
		{"ListTurns", testListTurns},
		{"ListTurnsPaging", testListTurnsPaging},
		{"ListTurnsInvalid", testListTurnsInvalid},
		{"DeleteTurn", testDeleteTurn},
		{"Context", testContext},
		{"Concurrency", testConcurrency},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

// ToolCallCard returns a new, valid tool.call card of the given project,
// turn and tool call.
func ToolCallCard(projectID, agentTurnID, toolCallID string) *card.Card {
	content, _ := json.Marshal(card.ToolCallContent{
		ToolName:      "weather.get",
		Arguments:     json.RawMessage(`{"city":"Oslo","days":3}`),
		TargetSubject: "cg.v1." + projectID + ".main.cmd.tool.weather.get",
	})
	return &card.Card{
		CardID:     card.NewID(),
		ProjectID:  projectID,
		Type:       card.TypeToolCall,
		AuthorID:   "agent-1",
		Content:    content,
		Metadata:   card.Metadata{AgentID: "agent-1", AgentTurnID: agentTurnID, StepID: "step-1", ToolCallID: toolCallID},
		ToolCallID: toolCallID,
		CreatedAt:  time.Now(),
	}
}

// ToolResultCard returns a new, valid tool.result card for the given call;
// statuses other than success and partial carry an error.
func ToolResultCard(projectID, agentTurnID, toolCallID string, status card.Status) *card.Card {
	rc := card.ToolResultContent{Status: status, AfterExecution: card.Suspend, Result: json.RawMessage(`{"temp_c":7}`)}
	if status != card.StatusSuccess && status != card.StatusPartial {
		rc = card.NewResultContent(status, card.Suspend, card.CodeInternalError, "the tool failed", nil)
	}
	content, _ := json.Marshal(rc)
	return &card.Card{
		CardID:     card.NewID(),
		ProjectID:  projectID,
		Type:       card.TypeToolResult,
		AuthorID:   "svc-weather",
		Content:    content,
		Metadata:   card.Metadata{AgentTurnID: agentTurnID, ToolCallID: toolCallID, FunctionName: "weather.get"},
		ToolCallID: toolCallID,
		CreatedAt:  time.Now(),
	}
}

// NoteCard returns a new, valid agent.thought card whose content is text;
// agentTurnID may be empty (the card then belongs to no turn).
func NoteCard(projectID, agentTurnID, text string) *card.Card {
	content, _ := json.Marshal(map[string]string{"text": text})
	return &card.Card{
		CardID:    card.NewID(),
		ProjectID: projectID,
		Type:      card.TypeAgentThought,
		Content:   content,
		Metadata:  card.Metadata{AgentTurnID: agentTurnID, Role: "assistant"},
		CreatedAt: time.Now(),
	}
}

// clone returns a deep enough copy of c to change any field.
func clone(c *card.Card) *card.Card {
	cc := *c
	cc.Content = append(json.RawMessage(nil), c.Content...)
	if c.Metadata.Extra != nil {
		cc.Metadata.Extra = make(map[string]json.RawMessage, len(c.Metadata.Extra))
		for k, v := range c.Metadata.Extra {
			cc.Metadata.Extra[k] = v
		}
	}
	return &cc
}

// encode is card.Encode for tests.
func encode(t *testing.T, c *card.Card) string {
	t.Helper()
	b, err := card.Encode(c)
	if err != nil {
		t.Fatalf("encode card %s: %v", c.CardID, err)
	}
	return string(b)
}

// sameCard fails unless got has the canonical bytes of want.
func sameCard(t *testing.T, what string, got, want *card.Card) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s: got no card, want %s", what, want.CardID)
	}
	if g, w := encode(t, got), encode(t, want); g != w {
		t.Fatalf("%s: card differs\n got: %s\nwant: %s", what, g, w)
	}
}

// sameCards fails unless got and want are the same cards in the same order.
func sameCards(t *testing.T, what string, got, want []*card.Card) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d cards %v, want %d %v", what, len(got), ids(got), len(want), ids(want))
	}
	for i := range got {
		sameCard(t, what, got[i], want[i])
	}
}

// ids lists the card ids of cards.
func ids(cards []*card.Card) []string {
	out := make([]string, len(cards))
	for i, c := range cards {
		if c != nil {
			out[i] = c.CardID
		}
	}
	return out
}

// mustPut puts cards and fails the test on error.
func mustPut(t *testing.T, s cardstore.Store, cards ...*card.Card) {
	t.Helper()
	if err := s.Put(t.Context(), cards...); err != nil {
		t.Fatalf("put %v: %v", ids(cards), err)
	}
}

// wantErr fails unless errors.Is(err, target).
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want one wrapping %v", what, err, target)
	}
}

// wantNotStored fails if any of the cards is stored.
func wantNotStored(t *testing.T, what string, s cardstore.Store, cards ...*card.Card) {
	t.Helper()
	for _, c := range cards {
		_, err := s.Get(t.Context(), c.ProjectID, c.CardID)
		if !errors.Is(err, cardstore.ErrNotFound) {
			t.Fatalf("%s: card %s: got error %v, want ErrNotFound (nothing of a failed put may be stored)", what, c.CardID, err)
		}
	}
}
