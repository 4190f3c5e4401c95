package turn_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/turn"
)

// Fixture of BenchmarkTurnShow: a store of benchOther cards spread over
// benchTurns turns, plus one turn of benchCalls tool calls (a tool.call and
// a tool.result card each), interleaved. Built once per test binary, only
// when the benchmark runs; removed by TestMain.
const (
	benchOther = 1_000_000
	benchTurns = 50_000
	benchCalls = 10_000
	benchTurn  = "turn-show-big"
)

var showFixture struct {
	once sync.Once
	dir  string
	s    *boltstore.Store
	err  error
}

// showStore builds the fixture. The bulk load turns bbolt's fsync off
// (the store's DB handle) and syncs once at the end: the benchmark measures
// reading, and an fsync per 1000-card batch would only make the build
// slower.
func showStore(b *testing.B) *boltstore.Store {
	showFixture.once.Do(func() {
		start := time.Now()
		f := &showFixture
		if f.dir, f.err = os.MkdirTemp("", "turn-bench-"); f.err != nil {
			return
		}
		if f.s, f.err = boltstore.Open(filepath.Join(f.dir, "cards.db")); f.err != nil {
			return
		}
		db := f.s.DB()
		db.NoSync = true
		ctx := context.Background()
		calls, other := 0, 0
		batch := make([]*card.Card, 0, cardstore.MaxBatch)
		flush := func() {
			if f.err == nil && len(batch) > 0 {
				f.err = f.s.Put(ctx, batch...)
			}
			batch = batch[:0]
		}
		thought := json.RawMessage(`{"text":"considering the next step of the plan"}`)
		for i := 0; f.err == nil && (calls < benchCalls || other < benchOther); i++ {
			if calls < benchCalls && i%100 == 0 { // 2 big-turn cards per 100
				id := fmt.Sprintf("call-%05d", calls)
				at := time.Duration(calls) * time.Millisecond
				batch = append(batch,
					callCard(0, benchTurn, id, "weather.get", `{"city":"Oslo","days":3}`, fmt.Sprintf("s%d", calls/4), 1, at),
					resultCard(0, benchTurn, id, "weather.get", ok(`{"city":"Oslo","forecast":[12,14,11]}`), 1, at+3*time.Millisecond))
				batch[len(batch)-2].CardID, batch[len(batch)-1].CardID = card.NewID(), card.NewID()
				calls++
			} else {
				batch = append(batch, &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: card.TypeAgentThought, Content: thought,
					CreatedAt: t0, Metadata: card.Metadata{AgentID: "agent-b", AgentTurnID: fmt.Sprintf("turn-%d", other%benchTurns)}})
				other++
			}
			if len(batch) >= cardstore.MaxBatch-1 {
				flush()
			}
		}
		flush()
		db.NoSync = false
		if f.err == nil {
			f.err = db.Sync()
		}
		fmt.Fprintf(os.Stderr, "TurnShow fixture: %d cards (%d other turns + one turn of %d calls) in %v\n",
			other+2*calls, benchTurns, calls, time.Since(start).Round(time.Second))
	})
	if showFixture.err != nil {
		b.Fatal(showFixture.err)
	}
	return showFixture.s
}

// BenchmarkTurnShow measures `utpmesh turns show` of a turn of 10,000 calls
// (20,000 cards) in a store of over a million cards: Load (every page of
// the turn, decoded and paired) plus rendering the timeline or the JSON.
// "bolt" reads the store in-process; "nats" reads it through a
// natsstore client and server on an embedded nats-server, as the CLI does
// (both ends in this process). cpu-ms/turn is the process's CPU time per
// turn (all threads, GC included): on a busy machine it says more than the
// wall clock.
func BenchmarkTurnShow(b *testing.B) {
	s := showStore(b)
	srv := meshtest.NATS(b)
	ns, err := natsstore.NewServer(meshtest.Conn(b, srv), s, natsstore.ServerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ns.Stop(ctx)
	})
	client, err := natsstore.NewClient(meshtest.Conn(b, srv), svc.WithTimeout(time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	// Render to a file, as the CLI does to its standard output, so that the
	// cost of the writes (system calls) counts.
	out, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = out.Close() })
	ctx := context.Background()
	for _, st := range []struct {
		name  string
		store cardstore.Store
	}{{"bolt", s}, {"nats", client}} {
		for _, r := range []struct {
			name   string
			render func(io.Writer, *turn.Turn) error
		}{
			{"timeline", turn.WriteTimeline},
			{"json", func(w io.Writer, t *turn.Turn) error { return json.NewEncoder(w).Encode(t) }},
		} {
			b.Run(st.name+"/"+r.name, func(b *testing.B) {
				b.ReportAllocs()
				cpu0, cpuOK := cpuTime()
				for b.Loop() {
					t, err := turn.Load(ctx, st.store, "demo", benchTurn)
					if err != nil {
						b.Fatal(err)
					}
					if len(t.Calls) != benchCalls || t.Counts["success"] != benchCalls || len(t.Problems) != 0 {
						b.Fatalf("turn has %d calls (%v, problems %q), want %d successful", len(t.Calls), t.Counts, t.Problems, benchCalls)
					}
					if err := r.render(out, t); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/turn")
				if cpu1, ok := cpuTime(); ok && cpuOK {
					// Every thread of the process: the loop, the GC and,
					// for "nats", the server and the broker.
					b.ReportMetric(float64((cpu1-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/turn")
				}
			})
		}
	}
}

// TestMain removes the benchmark fixture after the run.
func TestMain(m *testing.M) {
	code := m.Run()
	if showFixture.s != nil {
		_ = showFixture.s.Close()
	}
	if showFixture.dir != "" {
		_ = os.RemoveAll(showFixture.dir)
	}
	os.Exit(code)
}
