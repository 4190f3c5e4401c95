package jsstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/jsstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// The benchmarks run every operation against boltstore, against jsstore on
// a single-node nats-server (R1) and against jsstore with three replicas
// on a 3-node cluster in this process (R3, the client on one node; every
// server fsyncs before it acknowledges), all on the same disk, so that one
// run compares them:
//
//	go test -run '^$' -bench . -benchtime 2s ./cardstore/jsstore/

// benchCard returns a tool.call card whose canonical encoding is about 300
// bytes (the card of boltstore's benchmarks).
func benchCard(projectID, turnID string) *card.Card {
	content, _ := json.Marshal(card.ToolCallContent{
		ToolName:      "weather.get",
		Arguments:     json.RawMessage(`{"city":"Oslo","days":3}`),
		TargetSubject: "cg.v1." + projectID + ".main.cmd.tool.weather.get",
	})
	return &card.Card{
		CardID:     card.NewID(),
		ProjectID:  projectID,
		Type:       card.TypeToolCall,
		Content:    content,
		Metadata:   card.Metadata{AgentTurnID: turnID},
		ToolCallID: "call-1",
		CreatedAt:  time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC),
	}
}

// backends opens a fresh store of each kind.
func backends(b *testing.B) []struct {
	name string
	s    cardstore.Store
} {
	ns := startServer(b, "")
	nc := connect(b, ns)
	bs, err := boltstore.Open(filepath.Join(b.TempDir(), "cards.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bs.Close() })
	return []struct {
		name string
		s    cardstore.Store
	}{{"bolt", bs}, {"js-R1", open(b, nc, jsstore.Config{})}, {"js-R3", openR3(b, startCluster(b, 3), 0, newStream())}}
}

// BenchmarkPut measures durable single-card puts from 1, 16 and 64
// concurrent writers, each writing to a turn of its own (every put after
// the first of a turn updates the turn; none starts a new one). One op is
// one Put of one ~300-byte card.
func BenchmarkPut(b *testing.B) {
	for _, be := range backends(b) {
		for _, writers := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/writers=%d", be.name, writers), func(b *testing.B) {
				var next atomic.Int64
				var wg sync.WaitGroup
				run := fmt.Sprintf("%d", time.Now().UnixNano())
				b.ResetTimer()
				for w := range writers {
					tmpl := benchCard("bench", fmt.Sprintf("turn-%s-%d", run, w))
					wg.Go(func() {
						for next.Add(1) <= int64(b.N) {
							c := *tmpl
							c.CardID = card.NewID()
							if err := be.s.Put(context.Background(), &c); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "puts/s")
			})
		}
	}
}

// BenchmarkNewTurn measures puts that each start a new turn of one
// project, from 1 and 16 writers: in jsstore these serialise on the
// project's turn list.
func BenchmarkNewTurn(b *testing.B) {
	for _, be := range backends(b) {
		for _, writers := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/writers=%d", be.name, writers), func(b *testing.B) {
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				for range writers {
					wg.Go(func() {
						for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
							if err := be.s.Put(context.Background(), benchCard("bench", card.NewID())); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "puts/s")
			})
		}
	}
}

// BenchmarkGet measures reading one card by id from 1 and 16 readers, out
// of 10,000 stored.
func BenchmarkGet(b *testing.B) {
	for _, be := range backends(b) {
		ids := make([]string, 0, 10_000)
		for batch := 0; batch < 10; batch++ {
			cards := make([]*card.Card, 0, 1000)
			for range 900 { // within nats-server's default batch size
				c := benchCard("bench", fmt.Sprintf("turn-%d", batch))
				cards = append(cards, c)
				ids = append(ids, c.CardID)
			}
			if err := be.s.Put(context.Background(), cards...); err != nil {
				b.Fatal(err)
			}
		}
		for _, readers := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/readers=%d", be.name, readers), func(b *testing.B) {
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				for range readers {
					wg.Go(func() {
						for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
							if _, err := be.s.Get(context.Background(), "bench", ids[int(n)%len(ids)]); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "gets/s")
			})
		}
	}
}

// BenchmarkListTurn measures replaying a 5,000-card turn (every page of
// ListTurn at MaxPage) from a store that also holds 20,000 cards of 200
// other turns. One op is the whole turn; cards/s counts cards read and
// decoded.
func BenchmarkListTurn(b *testing.B) {
	const turnCards, otherCards, per = 5_000, 20_000, 900
	for _, be := range backends(b) {
		turnLeft, otherLeft := turnCards, otherCards
		for batch := 0; turnLeft+otherLeft > 0; batch++ {
			cards := make([]*card.Card, 0, per)
			turn := fmt.Sprintf("turn-%d", batch%200)
			if batch%5 == 0 && turnLeft > 0 {
				turn = "turn-big"
			}
			for len(cards) < per && turnLeft+otherLeft > 0 {
				cards = append(cards, benchCard("bench", turn))
				if turn == "turn-big" {
					if turnLeft--; turnLeft == 0 {
						break
					}
				} else {
					otherLeft--
				}
			}
			if err := be.s.Put(context.Background(), cards...); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(be.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				all, err := cardstore.AllTurn(context.Background(), be.s, "bench", "turn-big")
				if err != nil {
					b.Fatal(err)
				}
				if len(all) != turnCards {
					b.Fatalf("turn has %d cards, want %d", len(all), turnCards)
				}
				n++
			}
			b.ReportMetric(float64(n*turnCards)/b.Elapsed().Seconds(), "cards/s")
		})
	}
}
