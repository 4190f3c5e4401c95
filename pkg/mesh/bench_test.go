package mesh_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// BenchmarkRoundTrip measures, on one embedded server in one run:
//
//   - utp: the full durable UTP round trip of a no-op tool (echo): tool.call
//     card put over NATS → JetStream command → worker (claim, card read,
//     schema, result card put) → durable report → inbox (bbolt entry) →
//     wakeup → result card read over NATS → inbox ack;
//   - nats-reqrep: raw core NATS request-reply (the non-durable limit);
//   - naive-hop: one naive durable hop: JetStream publish → pull consumer →
//     one fsync'd bbolt write → core NATS reply.
//
// each at concurrency 1 and 64, and prints calls/s, p50, p99 and the ratios.
// Run it with a fixed op count, e.g. -benchtime 2000x (make bench does).
func BenchmarkRoundTrip(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet, Tools: []worker.Tool{echo.Tool()},
		Worker: worker.Config{Concurrency: 64}})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Stop(ctx)
	nc, err := nats.Connect(m.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()

	results := map[string]stats{}
	for _, c := range []int{1, 64} {
		name := fmt.Sprintf("utp/c=%d", c)
		b.Run(name, func(b *testing.B) {
			ac, err := agent.New(nc, agent.Config{Project: "demo", Channel: "main", AgentID: fmt.Sprintf("bench-%d", c)})
			if err != nil {
				b.Fatal(err)
			}
			defer ac.Close()
			var n atomic.Int64
			results[name] = measure(b, c, func() error {
				i := n.Add(1)
				_, err := ac.Call(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: fmt.Sprintf("turn-%d", i%50), Arguments: json.RawMessage(`{"i":1}`)})
				return err
			})
		})
		name = fmt.Sprintf("nats-reqrep/c=%d", c)
		b.Run(name, func(b *testing.B) {
			sub, err := nc.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
			if err != nil {
				b.Fatal(err)
			}
			defer sub.Unsubscribe()
			payload := []byte(`{"i":1}`)
			results[name] = measure(b, c, func() error {
				_, err := nc.Request("bench.echo", payload, 10*time.Second)
				return err
			})
		})
		name = fmt.Sprintf("naive-hop/c=%d", c)
		b.Run(name, func(b *testing.B) {
			results[name] = naiveHop(b, nc, filepath.Join(dir, fmt.Sprintf("hop-%d.db", c)), c)
		})
	}
	if len(results) == 6 {
		fmt.Fprintf(os.Stdout, "\n%-16s %12s %10s %10s\n", "round trip", "calls/s", "p50", "p99")
		for _, k := range []string{"nats-reqrep/c=1", "naive-hop/c=1", "utp/c=1", "nats-reqrep/c=64", "naive-hop/c=64", "utp/c=64"} {
			s := results[k]
			fmt.Fprintf(os.Stdout, "%-16s %12.0f %10v %10v\n", k, s.rate, s.p50.Round(time.Microsecond), s.p99.Round(time.Microsecond))
		}
		for _, c := range []string{"1", "64"} {
			u := results["utp/c="+c]
			fmt.Fprintf(os.Stdout, "c=%s: utp/nats-reqrep throughput %.3f, utp/naive-hop throughput %.3f\n", c,
				u.rate/results["nats-reqrep/c="+c].rate, u.rate/results["naive-hop/c="+c].rate)
		}
	}
}

type stats struct {
	rate     float64
	p50, p99 time.Duration
}

// measure runs b.N operations on c goroutines and reports calls/s, p50, p99.
func measure(b *testing.B, c int, op func() error) stats {
	b.Helper()
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	b.ResetTimer()
	start := time.Now()
	for g := 0; g < c; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				if err := op(); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := firstErr.Load().(error); err != nil {
		b.Fatal(err)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	s := stats{rate: float64(b.N) / elapsed.Seconds(), p50: lat[len(lat)/2], p99: lat[len(lat)*99/100]}
	b.ReportMetric(s.rate, "calls/s")
	b.ReportMetric(float64(s.p50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(s.p99.Microseconds()), "p99-µs")
	return s
}

// naiveHop is the reference durable hop: JetStream publish → pull consumer →
// one fsync'd bbolt write per message → core NATS reply.
func naiveHop(b *testing.B, nc *nats.Conn, path string, c int) stats {
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	stream := fmt.Sprintf("bench_hop_%d", c)
	subj := fmt.Sprintf("bench.hop.%d", c)
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subj}, Storage: jetstream.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	defer js.DeleteStream(ctx, stream)
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "hop", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		b.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	_ = db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists([]byte("k")); return err })
	sem := make(chan struct{}, 64)
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			err := db.Update(func(tx *bolt.Tx) error {
				bk := tx.Bucket([]byte("k"))
				id, _ := bk.NextSequence()
				var key [8]byte
				binary.BigEndian.PutUint64(key[:], id)
				return bk.Put(key[:], msg.Data())
			})
			if err != nil {
				return
			}
			_ = nc.Publish(msg.Headers().Get("Reply-To"), []byte("ok"))
			_ = msg.Ack()
		}()
	}, jetstream.PullMaxMessages(128))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Stop()
	return measure(b, c, func() error {
		inbox := nats.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
		m := nats.NewMsg(subj)
		m.Header.Set("Reply-To", inbox)
		m.Data = []byte(`{"i":1}`)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			return err
		}
		_, err = sub.NextMsg(10 * time.Second)
		return err
	})
}
