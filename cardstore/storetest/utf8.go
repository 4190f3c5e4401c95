package storetest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// testInvalidUTF8: a card holding invalid UTF-8 in any string — content,
// metadata (typed fields, extra values and keys), type, author — is
// refused with ErrInvalid naming the field, and nothing of its Put is
// stored: encoding/json would have stored U+FFFD in place of the bytes
// sent. Valid non-ASCII text (and U+FFFD itself) is stored as it came.
func testInvalidUTF8(t *testing.T, s cardstore.Store) {
	const p = "proj-utf8"
	const bad = "a\xffb"
	mod := func(base *card.Card, f func(c *card.Card)) *card.Card {
		c := clone(base)
		f(c)
		return c
	}
	note := NoteCard(p, "turn-1", "n")
	call := ToolCallCard(p, "turn-1", "call-1")
	res := ToolResultCard(p, "turn-1", "call-1", card.StatusSuccess)
	tests := []struct {
		name  string
		c     *card.Card
		field string
	}{
		{"content string", mod(note, func(c *card.Card) { c.Content = json.RawMessage(`{"text":"` + bad + `"}`) }), "content.text"},
		{"content key", mod(note, func(c *card.Card) { c.Content = json.RawMessage(`{"` + bad + `":1}`) }), "a key of content"},
		{"tool.call arguments", mod(call, func(c *card.Card) {
			c.Content = json.RawMessage(`{"tool_name":"echo","arguments":{"text":["ok","` + bad + `"]}}`)
		}), "content.arguments.text[1]"},
		{"tool.result error message", mod(res, func(c *card.Card) {
			c.Content = json.RawMessage(`{"status":"failed","after_execution":"suspend","error":{"code":"x","message":"` + bad + `"}}`)
		}), "content.error.message"},
		{"metadata.agent_id", mod(note, func(c *card.Card) { c.Metadata.AgentID = bad }), "metadata.agent_id"},
		{"metadata.agent_turn_id", mod(note, func(c *card.Card) { c.Metadata.AgentTurnID = bad }), "metadata.agent_turn_id"},
		{"metadata extra value", mod(note, func(c *card.Card) {
			c.Metadata.Extra = map[string]json.RawMessage{"x_custom": json.RawMessage(`{"v":"` + bad + `"}`)}
		}), "metadata.x_custom.v"},
		{"metadata extra key", mod(note, func(c *card.Card) { c.Metadata.Extra = map[string]json.RawMessage{bad: json.RawMessage(`1`)} }), "a key of metadata"},
		{"type", mod(note, func(c *card.Card) { c.Type = "note." + bad }), "type"},
		{"author_id", mod(note, func(c *card.Card) { c.AuthorID = bad }), "author_id"},
	}
	for _, tc := range tests {
		err := s.Put(t.Context(), tc.c)
		wantErr(t, tc.name, err, cardstore.ErrInvalid)
		if !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), "UTF-8") {
			t.Fatalf("%s: error %q does not name %s and invalid UTF-8", tc.name, err, tc.field)
		}
		wantNotStored(t, tc.name, s, tc.c)
		// In a batch with a valid card, neither is stored.
		ok := NoteCard(p, "turn-1", "valid")
		wantErr(t, tc.name+" in a batch", s.Put(t.Context(), ok, tc.c), cardstore.ErrInvalid)
		wantNotStored(t, tc.name+" in a batch", s, ok, tc.c)
	}
	// Valid UTF-8 beyond ASCII, the replacement character included, is
	// kept as it came.
	good := NoteCard(p, "turn-1", "héllo, 世界 🙂 \uFFFD")
	good.Metadata.AgentID = "agent-é"
	mustPut(t, s, good)
	got, err := s.Get(t.Context(), p, good.CardID)
	if err != nil {
		t.Fatal(err)
	}
	sameCard(t, "card with non-ASCII text", got, good)
}
