package boltstore_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// TestReadCardsOutliveTheFile: reads decode inside their transaction, so
// the cards they return must own their bytes. After Close unmaps the file,
// every field of every card read is still intact (a field that pointed
// into the memory map would fault here).
func TestReadCardsOutliveTheFile(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 23, 7, 0, 0, 5, time.UTC)
	md := card.Metadata{AgentID: "agent-1", AgentTurnID: "turn-1", TurnEpoch: 2, StepID: "s1", ToolCallID: "call-1", TraceID: "0af7651916cd43dd8448eb211c80319c",
		Extra: map[string]json.RawMessage{"mandate": json.RawMessage(`"tok"`), "x": json.RawMessage(`{"k":[1,"é"]}`)}}
	call := &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: card.TypeToolCall, AuthorID: "agent-1", ToolCallID: "call-1", CreatedAt: at, Metadata: md,
		Content: json.RawMessage(`{"tool_name":"echo","arguments":{"text":"caf\u00e9 \"q\""},"target_subject":"cg.v1r3.demo.default.cmd.tool.echo"}`)}
	result := &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: card.TypeToolResult, AuthorID: "worker-1", ToolCallID: "call-1", CreatedAt: at.Add(time.Millisecond),
		Metadata: card.Metadata{AgentTurnID: "turn-1", TurnEpoch: 2, FunctionName: "echo"},
		Content:  json.RawMessage(`{"status":"failed","after_execution":"suspend","error":{"code":"bad_request","message":"m","detail":{"at":"/text"}}}`)}
	thought := &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: card.TypeAgentThought, CreatedAt: at, Metadata: card.Metadata{AgentTurnID: "turn-1"}}
	want := []*card.Card{call, result, thought}
	if err := s.Put(ctx, want...); err != nil {
		t.Fatal(err)
	}
	page, err := s.ListTurn(ctx, cardstore.ListTurnRequest{ProjectID: "demo", AgentTurnID: "turn-1"})
	if err != nil {
		t.Fatal(err)
	}
	many, err := s.GetMany(ctx, "demo", []string{call.CardID, result.CardID, thought.CardID})
	if err != nil {
		t.Fatal(err)
	}
	one, err := s.Get(ctx, "demo", call.CardID)
	if err != nil {
		t.Fatal(err)
	}
	found, err := s.FindToolResult(ctx, "demo", "turn-1", "call-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, got := range []struct {
		name  string
		cards []*card.Card
		want  []*card.Card
	}{
		{"ListTurn", page.Cards, want},
		{"GetMany", many.Cards, want},
		{"Get", []*card.Card{one}, want[:1]},
		{"FindToolResult", []*card.Card{found}, want[1:2]},
	} {
		if len(got.cards) != len(got.want) {
			t.Fatalf("%s: %d cards, want %d", got.name, len(got.cards), len(got.want))
		}
		for i, c := range got.cards {
			a, _ := card.Encode(c)
			b, _ := card.Encode(got.want[i])
			if string(a) != string(b) {
				t.Errorf("%s card %d after Close:\n got %s\nwant %s", got.name, i, a, b)
			}
			if err := c.Validate(); err != nil {
				t.Errorf("%s card %d after Close: %v", got.name, i, err)
			}
		}
	}
}
