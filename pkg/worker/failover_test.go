package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/subjects"
)

// deadStore is a worker's CardStore that fails every request once the
// worker is "killed": with its NATS connection closed, the worker can then
// neither ack nor renew anything, as if its process were gone.
type deadStore struct {
	// The interface, not *boltstore.Store, whose PutWithEntry would
	// bypass the Put below.
	cardstore.Store
	dead atomic.Bool
}

var errKilled = errors.New("worker process killed")

func (s *deadStore) Claim(ctx context.Context, req cardstore.ClaimRequest) (*cardstore.Claim, error) {
	if s.dead.Load() {
		return nil, errKilled
	}
	return s.Store.Claim(ctx, req)
}

func (s *deadStore) Put(ctx context.Context, cards ...*card.Card) error {
	if s.dead.Load() {
		return errKilled
	}
	return s.Store.Put(ctx, cards...)
}

// TestDeadWorkerFailover: a worker killed mid-call (its connection and
// store gone, its handler never returning) leaves the call to a second
// worker, which takes it over once the dead one's in-progress acks and
// claim renewals stop: after the default AckWait and claim lease (5 s),
// not after the old 30 s ack wait. The call has exactly one result, the
// second worker's.
func TestDeadWorkerFailover(t *testing.T) {
	stall := failover(t)
	t.Logf("failover: the second worker reported %v after the kill", stall.Round(time.Millisecond))
}

// BenchmarkFailover measures the stall of a call whose worker is killed
// mid-call: from the kill to the second worker's report (make bench;
// docs/performance.md). Each run takes about the default AckWait.
func BenchmarkFailover(b *testing.B) {
	var total, worst time.Duration
	for range b.N {
		stall := failover(b)
		total += stall
		worst = max(worst, stall)
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s/failover")
	b.ReportMetric(worst.Seconds(), "s-worst")
	b.ReportMetric(0, "ns/op")
}

// failover kills a worker mid-call and returns how long after the kill a
// second worker reported the call; it fails tb unless the second worker
// ran it once and its result is the call's one result.
func failover(t testing.TB) time.Duration {
	started := make(chan struct{}, 1)
	hang := make(chan struct{})
	var secondRuns atomic.Int32
	tool := func(h worker.HandlerFunc) worker.Tool {
		return worker.Tool{Name: "slow", Parameters: json.RawMessage(`{"type":"object"}`), Handler: h}
	}
	var ds *deadStore
	h := newHarnessWrapped(t, worker.Config{InstanceID: "first"}, nil, func(s *boltstore.Store) cardstore.Store {
		ds = &deadStore{Store: s}
		return ds
	}, tool(func(ctx context.Context, c *worker.Call) (worker.Result, error) {
		started <- struct{}{}
		select { // a dead process never returns; the test's end stops it
		case <-hang:
		case <-ctx.Done():
		}
		return worker.Result{}, ctx.Err()
	}))

	t.Cleanup(func() { close(hang) }) // before the first worker's Stop

	c := h.writeCall("slow", `{}`)
	h.publish(toolSubject("slow"), c.command("slow"), nil)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the first worker never started the call")
	}
	// Kill the first worker mid-call: no more in-progress acks, renewals
	// or results from it.
	url := h.nc.ConnectedUrl()
	ds.dead.Store(true)
	killed := time.Now()
	h.nc.Close()

	nc2, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc2.Close)
	reports := make(chan *nats.Msg, 16)
	rp, _ := subjects.InboxReportPattern(ver)
	if _, err := nc2.ChanSubscribe(rp, reports); err != nil {
		t.Fatal(err)
	}
	second, err := worker.New(nc2, worker.Config{Store: h.store, Registry: h.reg, InstanceID: "second", Projects: []string{project}, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn + 4}))},
		tool(func(ctx context.Context, c *worker.Call) (worker.Result, error) {
			secondRuns.Add(1)
			return worker.OK(json.RawMessage(`{"by":"second"}`)), nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = second.Stop(ctx)
	})
	js, _ := jetstream.New(nc2)
	ci, err := js.Consumer(context.Background(), streams.CommandStream(ver), streams.ToolConsumer("slow"))
	if err != nil {
		t.Fatal(err)
	}
	if got := ci.CachedInfo().Config.AckWait; got != worker.DefaultAckWait {
		t.Fatalf("tool consumer AckWait = %v, want the default %v", got, worker.DefaultAckWait)
	}

	// The call is taken over and reported long before the old 30 s ack
	// wait would have let it be redelivered at all.
	var r utp.Report
	select {
	case m := <-reports:
		if err := json.Unmarshal(m.Data, &r); err != nil || r.ToolCallID != c.id {
			t.Fatalf("report %s (%v), want one for %s", m.Data, err, c.id)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("no worker reported the call within 25 s of the kill: the dead worker's command waits out a long ack wait")
	}
	stall := time.Since(killed)
	if r.Status != card.StatusSuccess {
		t.Fatalf("status = %s, want succeeded", r.Status)
	}
	if n := secondRuns.Load(); n != 1 {
		t.Fatalf("the second worker ran the call %d times, want 1", n)
	}
	res, err := h.store.FindToolResult(context.Background(), project, c.turn, c.id)
	if err != nil {
		t.Fatal(err)
	}
	if tr, _ := res.ToolResult(); string(tr.Result) != `{"by":"second"}` {
		t.Fatalf("result = %s, want the second worker's", tr.Result)
	}
	return stall
}
