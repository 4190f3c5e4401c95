package natsstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
)

// BenchmarkResultPath is a worker's CardStore traffic for one call over
// NATS: claim, write the result (the call card is written first, outside
// the timer's interest only in that it is the same for both). plain uses
// the core's subjects; tool uses the tool's own subjects, where the server
// also finds the call card and checks the claim. Each runs on bbolt, on
// the replicated store (one server, one replica) and on the replicated
// store behind natsstore's generic checks.
//
//	go test -run '^$' -bench BenchmarkResultPath -benchtime 3s ./cardstore/natsstore/
func BenchmarkResultPath(b *testing.B) {
	for _, store := range []string{modeBolt, modeJS, modeJSGeneric} {
		for _, mode := range []string{"plain", "tool"} {
			b.Run(store+"/"+mode, func(b *testing.B) { benchResultPath(b, store, mode) })
		}
	}
}

func benchResultPath(b *testing.B, store, mode string) {
	m := serveTools(b, store)
	ctx := context.Background()
	if mode == "tool" {
		ctx = cardstore.WithTool(ctx, "echo")
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		turn, call := fmt.Sprintf("t%d", i), "c"
		if err := m.client.Put(context.Background(), callCard("p", turn, call, "echo")); err != nil {
			b.Fatal(err)
		}
		if _, err := m.client.Claim(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String(), Holder: "w/1", Lease: time.Minute}); err != nil {
			b.Fatal(err)
		}
		if err := m.client.Put(ctx, resultCard("p", turn, call, "echo")); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStartPath is how a worker begins a call over NATS: before
// StartCall, three requests in a row (find_result, claim.<tool>, get);
// now one start_call.<tool>. The call card is written beforehand, on the
// local store. msgs/call counts the worker connection's NATS messages
// (requests and replies) while the timer runs.
//
//	go test -run '^$' -bench BenchmarkStartPath -benchtime 2000x ./cardstore/natsstore/
func BenchmarkStartPath(b *testing.B) {
	for _, mode := range []string{"find-claim-get", "start-call"} {
		b.Run(mode, func(b *testing.B) {
			m := serveTools(b, modeBolt)
			ctx := cardstore.WithTool(context.Background(), "echo")
			ids := make([]string, b.N)
			for i := range b.N {
				c := callCard("p", fmt.Sprintf("t%d", i), "c", "echo")
				if err := m.store.Put(ctx, c); err != nil {
					b.Fatal(err)
				}
				ids[i] = c.CardID
			}
			before := m.nc.Stats()
			b.ResetTimer()
			for i := range b.N {
				turn := fmt.Sprintf("t%d", i)
				lease := time.Minute
				if mode == "start-call" {
					res, err := m.client.StartCall(ctx, cardstore.StartCallRequest{ProjectID: "p", AgentTurnID: turn, ToolCallID: "c",
						ToolCallCardID: ids[i], Holder: "w/1", Lease: lease})
					if err != nil || res.Claim == nil || res.CallCard == nil {
						b.Fatalf("start call: %+v, %v", res, err)
					}
					continue
				}
				if _, err := m.client.FindToolResult(ctx, "p", turn, "c"); !errors.Is(err, cardstore.ErrNotFound) {
					b.Fatalf("find result: %v", err)
				}
				if _, err := m.client.Claim(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: cardstore.CallKey{AgentTurnID: turn, ToolCallID: "c"}.String(), Holder: "w/1", Lease: lease}); err != nil {
					b.Fatal(err)
				}
				if _, err := m.client.Get(ctx, "p", ids[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			after := m.nc.Stats()
			b.ReportMetric(float64(after.OutMsgs-before.OutMsgs+after.InMsgs-before.InMsgs)/float64(b.N), "msgs/call")
		})
	}
}
