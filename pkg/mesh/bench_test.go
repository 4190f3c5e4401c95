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
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/embednats"
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
//   - naive-hop: the fair durable hop: JetStream publish (SyncAlways, like
//     the mesh's streams) → pull consumer → one fsync'd bbolt write → core
//     NATS reply;
//   - hop-default-sync: the same hop on a second server with JetStream's
//     default sync (a flush every 2 minutes, no fsync before the ack);
//   - js-publish: a JetStream publish (SyncAlways) and its PubAck alone, on
//     one stream: the ceiling of the hop and of the round trip, which each
//     store one message per call on one stream (see jsPublish);
//
// each at concurrency 1 and 64, and prints calls/s, p50, p99 and the ratios,
// and, counted during the run: durable writes per call (bbolt commits of
// cards.db, inbox.db and the hop's file — two fdatasyncs each — and
// messages stored by JetStream streams — one fsync each with SyncAlways),
// NATS messages per call (client messages into the server) and process CPU
// time per call. Run it with a fixed op count, e.g. -benchtime 2000x (make
// bench does).
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

	def, err := embednats.Start(embednats.Config{DataDir: filepath.Join(dir, "default-sync"), Port: -1, JetStream: true,
		SyncInterval: 2 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer def.Shutdown(ctx)
	ncDef, err := def.Connect()
	if err != nil {
		b.Fatal(err)
	}
	defer ncDef.Close()
	meter := &costMeter{ns: m.NATS().NATS(), files: []*bolt.DB{m.CardsDB()}} // the node file: cards and inbox

	results := map[string]stats{}
	costs := map[string]cost{}
	for _, c := range []int{1, 64} {
		name := fmt.Sprintf("utp/c=%d", c)
		b.Run(name, func(b *testing.B) {
			ac, err := agent.New(nc, agent.Config{Project: "demo", Channel: "main", AgentID: fmt.Sprintf("bench-%d", c)})
			if err != nil {
				b.Fatal(err)
			}
			defer ac.Close()
			var n atomic.Int64
			before := meter.read(b)
			results[name] = measure(b, c, func() error {
				i := n.Add(1)
				_, err := ac.Call(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: fmt.Sprintf("turn-%d", i%50), Arguments: json.RawMessage(`{"i":1}`)})
				return err
			})
			costs[name] = meter.read(b).since(before, b.N)
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
			results[name], costs[name] = naiveHop(b, m.NATS().NATS(), nc, filepath.Join(dir, fmt.Sprintf("hop-%d.db", c)), c, true)
		})
		name = fmt.Sprintf("js-publish/c=%d", c)
		b.Run(name, func(b *testing.B) {
			results[name], costs[name] = jsPublish(b, m.NATS().NATS(), nc, c)
		})
		name = fmt.Sprintf("hop-default-sync/c=%d", c)
		b.Run(name, func(b *testing.B) {
			results[name], costs[name] = naiveHop(b, def.NATS(), ncDef, filepath.Join(dir, fmt.Sprintf("hop-def-%d.db", c)), c, false)
		})
	}
	if len(results) == 10 {
		fmt.Fprintf(os.Stdout, "\n%-22s %9s %10s %10s %13s %11s %11s %11s\n", "round trip", "calls/s", "p50", "p99", "fsyncs/call", "pages/call", "msgs/call", "cpu/call")
		for _, c := range []string{"1", "64"} {
			for _, k := range []string{"nats-reqrep", "js-publish", "hop-default-sync", "naive-hop", "utp"} {
				k += "/c=" + c
				s, co := results[k], costs[k]
				fsyncs, pages, msgs, cpu := "-", "-", "-", "-"
				if co.n > 0 {
					fsyncs = fmt.Sprintf("%.2f", co.fsyncs)
					pages = fmt.Sprintf("%.1f", co.pages)
					msgs = fmt.Sprintf("%.1f", co.msgs)
					cpu = co.cpu.Round(time.Microsecond).String()
				}
				fmt.Fprintf(os.Stdout, "%-22s %9.0f %10v %10v %13s %11s %11s %11s\n", k, s.rate, s.p50.Round(time.Microsecond), s.p99.Round(time.Microsecond), fsyncs, pages, msgs, cpu)
			}
		}
		for _, c := range []string{"1", "64"} {
			u, h := results["utp/c="+c], results["naive-hop/c="+c]
			fmt.Fprintf(os.Stdout, "c=%s: utp/naive-hop throughput %.3f, p50 utp/naive-hop %.2f×, utp/nats-reqrep throughput %.3f, utp/js-publish %.3f, naive-hop/js-publish %.3f\n", c,
				u.rate/h.rate, float64(u.p50)/float64(h.p50), u.rate/results["nats-reqrep/c="+c].rate,
				u.rate/results["js-publish/c="+c].rate, h.rate/results["js-publish/c="+c].rate)
		}
	}
}

// cost is what one call costs on average, counted during a run.
type cost struct {
	n      int
	fsyncs float64 // 2 per bbolt commit + 1 per message JetStream stored
	pages  float64 // page writes of the bbolt files (pwrite calls, the meta page's included)
	msgs   float64 // client messages into the NATS server
	cpu    time.Duration
}

// costMeter reads the counters cost is made of.
type costMeter struct {
	ns    *server.Server
	files []*bolt.DB
	// jsNoSync: the server does not fsync stored messages (default sync).
	jsNoSync bool
}

type counters struct {
	commits, stored, inMsgs uint64
	writes                  int64
	cpu                     time.Duration
}

func (m *costMeter) read(b *testing.B) counters {
	b.Helper()
	var c counters
	for _, db := range m.files {
		_ = db.View(func(tx *bolt.Tx) error { c.commits += uint64(tx.ID()); return nil })
		st := db.Stats()
		c.writes += st.TxStats.GetWrite()
	}
	if !m.jsNoSync {
		c.stored = jsStored(b, m.ns)
	}
	c.inMsgs = varzInMsgs(b, m.ns)
	c.cpu = processCPU()
	return c
}

func (c counters) since(before counters, n int) cost {
	f := float64(n)
	return cost{n: n,
		fsyncs: (2*float64(c.commits-before.commits) + float64(c.stored-before.stored)) / f,
		pages:  float64(c.writes-before.writes) / f,
		msgs:   float64(c.inMsgs-before.inMsgs) / f,
		cpu:    (c.cpu - before.cpu) / time.Duration(n)}
}

// jsStored is the number of messages every stream of the server has stored
// so far (the sum of their last sequence numbers).
func jsStored(b *testing.B, ns *server.Server) uint64 {
	info, err := ns.Jsz(&server.JSzOptions{Streams: true, Accounts: true})
	if err != nil {
		b.Fatal(err)
	}
	var n uint64
	for _, a := range info.AccountDetails {
		for _, st := range a.Streams {
			n += st.State.LastSeq
		}
	}
	return n
}

func varzInMsgs(b *testing.B, ns *server.Server) uint64 {
	v, err := ns.Varz(nil)
	if err != nil {
		b.Fatal(err)
	}
	return uint64(v.InMsgs)
}

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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

// benchStream creates a file stream on subj for one benchmark row,
// deleted when the row ends.
func benchStream(b *testing.B, nc *nats.Conn, name, subj string) (jetstream.JetStream, jetstream.Stream) {
	b.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	s, err := js.CreateOrUpdateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: []string{subj}, Storage: jetstream.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	return js, s
}

// jsPublish measures the ceiling of anything that stores one message per
// call on one stream: a JetStream publish with SyncAlways and its PubAck,
// nothing else. The server stores and fsyncs a stream's messages one after
// another, so both the naive hop (one message on its stream per call) and
// the UTP round trip (one command on the command stream per call) are
// bounded by this rate.
func jsPublish(b *testing.B, ns *server.Server, nc *nats.Conn, c int) (stats, cost) {
	ctx := context.Background()
	subj := fmt.Sprintf("bench.pub.%d", c)
	js, _ := benchStream(b, nc, fmt.Sprintf("bench_pub_%d", c), subj)
	meter := &costMeter{ns: ns}
	before := meter.read(b)
	payload := []byte(`{"i":1}`)
	st := measure(b, c, func() error {
		_, err := js.Publish(ctx, subj, payload)
		return err
	})
	return st, meter.read(b).since(before, b.N)
}

// naiveHop is the reference durable hop: JetStream publish → pull consumer →
// one fsync'd bbolt write per message → core NATS reply.
// syncAlways says whether the server fsyncs every stored message.
func naiveHop(b *testing.B, ns *server.Server, nc *nats.Conn, path string, c int, syncAlways bool) (stats, cost) {
	ctx := context.Background()
	subj := fmt.Sprintf("bench.hop.%d", c)
	js, s := benchStream(b, nc, fmt.Sprintf("bench_hop_%d", c), subj)
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
	meter := &costMeter{ns: ns, files: []*bolt.DB{db}, jsNoSync: !syncAlways}
	before := meter.read(b)
	st := measure(b, c, func() error {
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
	return st, meter.read(b).since(before, b.N)
}
