package kit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/internal/jskv/jskvtest"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// TestFollowerKillExactlyOnce: calls on the replicated (R3) state while a
// follower of its bucket is killed — the node the service's connection is
// on, so the connection fails over too, between one call's reads and its
// commit — each end with the one answer of
// their call: a call is retried (worker.ErrRetryLater, as the worker would
// redeliver it) but never fails for the loss, and every call created
// exactly one object.
func TestFollowerKillExactlyOnce(t *testing.T) {
	c := jskvtest.Start(t)
	var urls []string
	for _, s := range c.Servers {
		urls = append(urls, s.ClientURL())
	}
	cards, err := boltstore.Open(filepath.Join(t.TempDir(), "cards.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cards.Close() })
	// Connected to a follower of the bucket: find the leader first.
	s, nc := openOnFollower(t, c, urls, cards)
	var runs atomic.Int32
	const n = 40
	killed := -1
	kill := func() {
		for j, srv := range c.Servers {
			if srv.Name() == nc.ConnectedServerName() {
				killed = j
			}
		}
		c.Servers[killed].Shutdown()
	}
	tools, err := s.Tools(Spec{Name: "MAKE", Params: `{"type":"object"}`, Run: func(x *Exec) (Outcome, error) {
		runs.Add(1)
		if x.ToolCallID == fmt.Sprintf("call-%d", n/4) && killed < 0 {
			kill() // between the transaction's reads and its commit
		}
		id := x.ID("obj", 0)
		if _, err := toolkit.PutNew(x.Bucket("objs"), id, map[string]string{"id": id}, x.ToolCallID); err != nil {
			return Outcome{}, err
		}
		return Outcome{Result: map[string]string{"id": id}}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	retries := 0
	for i := range n {
		call := testCall(t, cards, "turn-1", fmt.Sprintf("call-%d", i))
		for attempt := 0; ; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			res, err := tools[0].Handler(ctx, call)
			cancel()
			if errors.Is(err, worker.ErrRetryLater) && attempt < 100 {
				retries++
				time.Sleep(100 * time.Millisecond) // the worker's redelivery delay, shortened
				continue
			}
			if err != nil {
				t.Fatalf("call %d (attempt %d) failed: %v", i, attempt, err)
			}
			raw, _ := res.Value.(json.RawMessage)
			if want := `"id":"` + determID(call) + `"`; !strings.Contains(string(raw), want) {
				t.Fatalf("call %d = %s, want %s", i, raw, want)
			}
			break
		}
	}
	objs := 0
	if err := s.st.View(context.Background(), func(tx state.Tx) error {
		return tx.Bucket("demo", "objs").Scan("", false, func(string, []byte) error { objs++; return nil })
	}); err != nil {
		t.Fatal(err)
	}
	if objs != n {
		t.Fatalf("objects after %d calls with a follower killed = %d, want %d", n, objs, n)
	}
	t.Logf("killed node %d (a follower, the connection's node); %d retries; Run ran %d times for %d calls", killed, retries, runs.Load(), n)
}

func determID(call *worker.Call) string {
	x := &Exec{Project: call.ProjectID, ToolCallID: call.Command.ToolCallID}
	return x.ID("obj", 0)
}

// openOnFollower opens the tasks group on the R3 state with a connection
// to a node that follows the bucket's stream leader (and knows every node,
// to fail over).
func openOnFollower(t *testing.T, c *jskvtest.Cluster, urls []string, cards *boltstore.Store) (*Service, *nats.Conn) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	boot := c.Conn(t, 0)
	bs, err := New("tasks", atlas.Deps{State: atlas.StateJetStream, StateReplicas: 3, NC: boot, Store: cards, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	_ = bs.Close()
	js, err := jetstream.New(boot)
	if err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(context.Background(), "KV_"+atlas.KVBucket("tasks"))
	if err != nil {
		t.Fatal(err)
	}
	leader := info.CachedInfo().Cluster.Leader
	for _, srv := range c.Servers {
		if srv.Name() == leader {
			continue
		}
		order := []string{srv.ClientURL()}
		for _, u := range urls {
			if u != srv.ClientURL() {
				order = append(order, u)
			}
		}
		nc, err := nats.Connect(strings.Join(order, ","), nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		s, err := New("tasks", atlas.Deps{State: atlas.StateJetStream, StateReplicas: 3, NC: nc, Store: cards, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s, nc
	}
	t.Fatal("no follower")
	return nil, nil
}
