package boltstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// BenchmarkStartCall measures a worker's part of a call in the store:
// StartCall (the claim, with the worker's default 5 s lease) and then the
// call's tool.result Put, which ends the claim, from 1 and 64 concurrent
// workers. The tool.call cards are written before the timer starts. One
// op is one call; commits/op counts the bbolt commits (fsyncs) per call.
func BenchmarkStartCall(b *testing.B) {
	for _, workers := range []int{1, 64} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			obs := &commits{}
			s, _ := openStore(b, boltstore.WithCommitObserver(obs))
			ctx := context.Background()
			calls := make([]*card.Card, b.N)
			for i := 0; i < b.N; i += cardstore.MaxBatch {
				batch := calls[i:min(i+cardstore.MaxBatch, b.N)]
				for j := range batch {
					batch[j] = storetest.ToolCallCard("bench", fmt.Sprintf("turn-%d", (i+j)%1000), fmt.Sprintf("call-%d", i+j))
				}
				if err := s.Put(ctx, batch...); err != nil {
					b.Fatal(err)
				}
			}
			obs.mu.Lock()
			before := obs.txs
			obs.mu.Unlock()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for w := range workers {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						c := calls[i]
						res, err := s.StartCall(ctx, cardstore.StartCallRequest{ProjectID: "bench", AgentTurnID: c.Metadata.AgentTurnID,
							ToolCallID: c.ToolCallID, ToolCallCardID: c.CardID, Holder: fmt.Sprintf("w%d/%d", w, i), Lease: 5 * time.Second})
						if err != nil || res.Claim == nil {
							b.Errorf("start call %d: %+v, %v", i, res, err)
							return
						}
						if err := s.Put(ctx, storetest.ToolResultCard("bench", c.Metadata.AgentTurnID, c.ToolCallID, card.StatusSuccess)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			obs.mu.Lock()
			b.ReportMetric(float64(obs.txs-before)/float64(b.N), "commits/op")
			obs.mu.Unlock()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		})
	}
}
