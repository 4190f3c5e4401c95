package jsstore_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/jsstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/internal/jskv/jskvtest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/embednats"
)

// startCluster starts three real nats-servers with JetStream in this
// process, clustered over routes on loopback (jskvtest), with the mesh's
// max payload and batch size, and returns them once every node's
// JetStream is current. They are shut down when the test ends.
func startCluster(t testing.TB, n int) []*server.Server {
	t.Helper()
	if n != 3 {
		t.Fatalf("startCluster: %d nodes; jskvtest starts three", n)
	}
	c := jskvtest.StartWith(t, func(o *server.Options) {
		o.MaxPayload = embednats.DefaultMaxPayload
		o.JetStreamLimits.MaxBatchSize = jsstore.MaxBatchMessages
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready := 0
		for _, ns := range c.Servers {
			if ns.JetStreamIsClustered() && ns.JetStreamIsCurrent() {
				ready++
			}
		}
		if ready == n {
			return c.Servers
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream cluster of %d not ready within 30s (%d current)", n, ready)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openR3 opens a store with three replicas through a connection to
// servers[i], waiting out the first moments of a new cluster, when the
// meta leader may not answer yet.
func openR3(t testing.TB, servers []*server.Server, i int, stream string) *jsstore.Store {
	t.Helper()
	nc, err := nats.Connect(servers[i].ClientURL(), nats.Name(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := jsstore.Open(t.Context(), nc, jsstore.Config{Stream: stream, Replicas: 3})
		if err == nil {
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
		if time.Now().After(deadline) || !(errors.Is(err, jsstore.ErrUnsupported) || errors.Is(err, jsstore.ErrUnavailable) || isTransient(err)) {
			t.Fatalf("open an R3 store: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// isTransient reports the errors of a cluster that is still electing.
func isTransient(err error) bool {
	var timeout interface{ Timeout() bool }
	return errors.As(err, &timeout) || errors.Is(err, nats.ErrTimeout)
}

// TestConformanceR3 runs the conformance suite against stores with three
// replicas on a 3-node cluster, each store's connection on another node,
// so that reads are answered by followers as well as the leader.
func TestConformanceR3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	servers := startCluster(t, 3)
	var next atomic.Int64
	storetest.Run(t, func(t *testing.T) cardstore.Store {
		return openR3(t, servers, int(next.Add(1)%3), newStream())
	})
}

// TestLeaderLoss: with three replicas, losing the server that leads the
// stream loses nothing acknowledged. Writers put calls and their results
// while the leader is shut down; once a new leader is elected, every
// acknowledged card is there, every call has exactly one result, and the
// store takes new writes. Writes that fail during the election were not
// acknowledged; the writers retry them, as the worker runtime does.
func TestLeaderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	servers := startCluster(t, 3)
	stream := newStream()
	urls := make([]string, len(servers))
	for i, ns := range servers {
		urls[i] = ns.ClientURL()
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var s *jsstore.Store
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s, err = jsstore.Open(t.Context(), nc, jsstore.Config{Stream: stream, Replicas: 3, RequestTimeout: 2 * time.Second}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctx := t.Context()
	const p, writers, perWriter = "proj-loss", 8, 40
	acked := make([][]*card.Card, writers)
	var wg sync.WaitGroup
	var written, failed atomic.Int64
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				turn, call := fmt.Sprintf("turn-%d-%d", w, i), "call"
				cards := []*card.Card{storetest.ToolCallCard(p, turn, call), storetest.ToolResultCard(p, turn, call, card.StatusSuccess)}
				for attempt := 0; ; attempt++ {
					err := s.Put(ctx, cards...)
					if err == nil {
						break
					}
					failed.Add(1)
					if attempt > 200 || ctx.Err() != nil {
						t.Errorf("writer %d, %s: still failing after the election: %v", w, turn, err)
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
				acked[w] = append(acked[w], cards...)
				written.Add(1)
			}
		})
	}
	// Shut the stream leader down once the writers are well under way.
	for written.Load() < writers*perWriter/4 {
		time.Sleep(5 * time.Millisecond)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	leader := info.CachedInfo().Cluster.Leader
	before := written.Load()
	for _, ns := range servers {
		if ns.Name() == leader {
			ns.Shutdown()
		}
	}
	wg.Wait()
	if before == writers*perWriter {
		t.Fatalf("every put was acknowledged before leader %s was shut down: the test proves nothing", leader)
	}
	t.Logf("leader %s shut down after %d of %d puts; %d attempts failed during the election and were retried", leader, before, writers*perWriter, failed.Load())
	if t.Failed() {
		t.FailNow()
	}
	if n := written.Load(); n != writers*perWriter {
		t.Fatalf("%d of %d puts acknowledged", n, writers*perWriter)
	}
	for w := range writers {
		for i := 0; i < len(acked[w]); i += 2 {
			call, res := acked[w][i], acked[w][i+1]
			all, err := cardstore.AllTurn(ctx, s, p, call.Metadata.AgentTurnID)
			if err != nil || len(all) != 2 || all[0].CardID != call.CardID || all[1].CardID != res.CardID {
				t.Fatalf("turn %s after losing leader %s: %v, %v; want its call and its one result", call.Metadata.AgentTurnID, leader, ids(all), err)
			}
			got, err := s.FindToolResult(ctx, p, call.Metadata.AgentTurnID, "call")
			if err != nil || got.CardID != res.CardID {
				t.Fatalf("result of %s: %v, %v", call.Metadata.AgentTurnID, got, err)
			}
		}
	}
	if n := len(listTurns(t, s, p)); n != writers*perWriter {
		t.Fatalf("%d turns listed after the leader loss, want %d", n, writers*perWriter)
	}
}

// ids lists card ids.
func ids(cards []*card.Card) []string {
	out := make([]string, len(cards))
	for i, c := range cards {
		out[i] = c.CardID
	}
	return out
}
