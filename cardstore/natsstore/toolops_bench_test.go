package natsstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
)

// BenchmarkResultPath is a worker's CardStore traffic for one call over
// NATS: claim, write the result (the call card is written first, outside
// the timer's interest only in that it is the same for both). plain uses
// the core's subjects; tool uses the tool's own subjects, where the server
// also finds the call card and checks the claim.
//
//	go test -run '^$' -bench BenchmarkResultPath -benchtime 3s ./cardstore/natsstore/
func BenchmarkResultPath(b *testing.B) {
	for _, mode := range []string{"plain", "tool"} {
		b.Run(mode, func(b *testing.B) {
			m := serveTools(b, false)
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
				if _, err := m.client.Claim(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: cardstore.ToolCallKey(turn, call), Holder: "w/1", Lease: time.Minute}); err != nil {
					b.Fatal(err)
				}
				if err := m.client.Put(ctx, resultCard("p", turn, call, "echo")); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
