package card_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// benchCards are a tool.call card as pkg/agent writes it (trace id, role,
// a mandate in metadata) and a tool.result card as pkg/worker writes it,
// in canonical encoding.
func benchCards(b *testing.B) map[string][]byte {
	at := time.Date(2026, 11, 23, 7, 0, 0, 123456789, time.UTC)
	md := card.Metadata{AgentID: "agent-demo", AgentTurnID: "turn-0001", TurnEpoch: 1, StepID: "s1", ToolCallID: "call-1",
		TraceID: "0af7651916cd43dd8448eb211c80319c", Role: "assistant",
		Extra: map[string]json.RawMessage{"mandate": json.RawMessage(`"eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJhZ2VudC1kZW1vIn0.c2ln"`)}}
	call := &card.Card{CardID: "019ab2c4-1c2d-7e3f-8a9b-0c1d2e3f4a5b", ProjectID: "demo", Type: card.TypeToolCall, AuthorID: "agent-demo",
		Content:  json.RawMessage(`{"tool_name":"weather.get","arguments":{"city":"Oslo","days":3},"target_subject":"cg.v1r3.demo.default.cmd.tool.weather.get"}`),
		Metadata: md, ToolCallID: "call-1", CreatedAt: at}
	res := *call
	res.CardID, res.Type, res.AuthorID = "019ab2c4-1c2d-7e3f-8a9b-0c1d2e3f4a5c", card.TypeToolResult, "worker-weather-1"
	res.Metadata = card.Metadata{AgentID: "agent-demo", AgentTurnID: "turn-0001", TurnEpoch: 1, ToolCallID: "call-1", FunctionName: "weather.get", Role: "tool", TraceID: md.TraceID}
	res.Content = json.RawMessage(`{"status":"success","after_execution":"suspend","result":{"city":"Oslo","forecast":[12,14,11]}}`)
	out := map[string][]byte{}
	for name, c := range map[string]*card.Card{"tool.call": call, "tool.result": &res} {
		enc, err := card.Encode(c)
		if err != nil {
			b.Fatal(err)
		}
		out[name] = enc
	}
	return out
}

// BenchmarkDecode measures reading one card: Decode (parse, validate,
// which decodes a tool content), and json.Unmarshal into a Card (what a
// NATS reply holding cards costs per card), for both tool card types.
func BenchmarkDecode(b *testing.B) {
	cards := benchCards(b)
	for _, name := range []string{"tool.call", "tool.result"} {
		enc := cards[name]
		b.Run(name+"/Decode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := card.Decode(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/json.Unmarshal", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var c card.Card
				if err := json.Unmarshal(enc, &c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
