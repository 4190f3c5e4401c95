package boltstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// Open a store, put a tool.call card and read it back.
func Example() {
	dir, err := os.MkdirTemp("", "boltstore-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	s, err := boltstore.Open(filepath.Join(dir, "cards.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	ctx := context.Background()
	call := &card.Card{
		CardID:    card.NewID(),
		ProjectID: "demo",
		Type:      card.TypeToolCall,
		Content: json.RawMessage(`{
			"tool_name": "weather.get",
			"arguments": {"city": "Oslo"},
			"target_subject": "cg.v1.demo.main.cmd.tool.weather.get"
		}`),
		Metadata:   card.Metadata{AgentTurnID: "turn-1"},
		ToolCallID: "call-1",
		CreatedAt:  time.Now(),
	}
	if err := s.Put(ctx, call); err != nil {
		log.Fatal(err)
	}

	got, err := s.Get(ctx, "demo", call.CardID)
	if err != nil {
		log.Fatal(err)
	}
	tc, err := got.ToolCall()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.Type, got.ToolCallID, tc.ToolName, string(tc.Arguments))
	// Output: tool.call call-1 weather.get {"city":"Oslo"}
}
