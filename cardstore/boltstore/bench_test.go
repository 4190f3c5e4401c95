package boltstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// benchCard returns a tool.call card whose canonical encoding is about 300
// bytes.
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

// BenchmarkPut measures durable (fsync'd) single-card puts from 1, 16 and
// 64 concurrent writers, with and without group commit. One op is one Put
// of one ~300-byte card; puts/s is the throughput of all writers together.
func BenchmarkPut(b *testing.B) {
	if n, err := card.Encode(benchCard("bench", "turn-0")); err == nil {
		b.Logf("card size: %d bytes", len(n))
	}
	for _, gc := range []bool{true, false} {
		b.Run("group-commit="+map[bool]string{true: "on", false: "off"}[gc], func(b *testing.B) {
			for _, writers := range []int{1, 16, 64} {
				b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
					benchPut(b, writers, boltstore.WithGroupCommit(gc))
				})
			}
		})
	}
}

func benchPut(b *testing.B, writers int, opts ...boltstore.Option) {
	s, _ := openStore(b, opts...)
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := range writers {
		tmpl := benchCard("bench", fmt.Sprintf("turn-%d", w))
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				c := *tmpl
				c.CardID = card.NewID()
				if err := s.Put(ctx, &c); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "puts/s")
}

// Fixture of BenchmarkListTurn: one turn of turnCards cards, interleaved
// with otherCards cards of 2,000 other turns and of no turn, built once per
// test binary and removed by TestMain.
const (
	turnCards  = 10_000
	otherCards = 200_000
	bigTurn    = "turn-big"
)

var fixture struct {
	once sync.Once
	dir  string
	s    *boltstore.Store
	err  error
}

// listFixture builds (once) and returns the ListTurn fixture store.
func listFixture(b *testing.B) *boltstore.Store {
	fixture.once.Do(func() {
		start := time.Now()
		fixture.dir, fixture.err = os.MkdirTemp("", "boltstore-bench-")
		if fixture.err != nil {
			return
		}
		s, err := boltstore.Open(filepath.Join(fixture.dir, "cards.db"))
		if err != nil {
			fixture.err = err
			return
		}
		fixture.s = s
		pad := strings.Repeat("z", 120)
		turnLeft, otherLeft := turnCards, otherCards
		for batch := 0; turnLeft+otherLeft > 0; batch++ {
			cards := make([]*card.Card, 0, cardstore.MaxBatch)
			for i := 0; len(cards) < cardstore.MaxBatch && turnLeft+otherLeft > 0; i++ {
				var c *card.Card
				if turnLeft > 0 && i%20 == 0 { // 50 turn cards per batch of 1000
					c = benchCard("bench", bigTurn)
					turnLeft--
				} else {
					turn := fmt.Sprintf("turn-%d", (batch*cardstore.MaxBatch+i)%2000)
					if i%10 == 1 {
						turn = "" // some cards belong to no turn
					}
					c = benchCard("bench", turn)
					c.Type = card.TypeAgentThought
					c.ToolCallID = ""
					c.Content = json.RawMessage(`{"text":"` + pad + `"}`)
					otherLeft--
				}
				cards = append(cards, c)
			}
			if err := s.Put(context.Background(), cards...); err != nil {
				fixture.err = fmt.Errorf("fixture batch %d: %w", batch, err)
				return
			}
		}
		fmt.Fprintf(os.Stderr, "ListTurn fixture: %d + %d cards in %v\n", turnCards, otherCards, time.Since(start).Round(time.Millisecond))
	})
	if fixture.err != nil {
		b.Fatal(fixture.err)
	}
	return fixture.s
}

// BenchmarkListTurn measures replaying a 10,000-card turn (every page of
// ListTurn at MaxPage) from a store holding 200,000 other cards. One op is
// the whole turn; cards/s counts cards read and decoded.
func BenchmarkListTurn(b *testing.B) {
	s := listFixture(b)
	ctx := context.Background()
	n := 0
	for b.Loop() {
		all, err := cardstore.AllTurn(ctx, s, "bench", bigTurn)
		if err != nil {
			b.Fatal(err)
		}
		if len(all) != turnCards {
			b.Fatalf("turn has %d cards, want %d", len(all), turnCards)
		}
		n++
	}
	b.ReportMetric(float64(n*turnCards)/b.Elapsed().Seconds(), "cards/s")
}

// TestMain removes the benchmark fixture after the run.
func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.s != nil {
		_ = fixture.s.Close()
	}
	if fixture.dir != "" {
		_ = os.RemoveAll(fixture.dir)
	}
	os.Exit(code)
}
