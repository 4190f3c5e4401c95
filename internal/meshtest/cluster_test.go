package meshtest_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/meshtest"
)

func TestMain(m *testing.M) {
	meshtest.RunClusterNode()
	os.Exit(m.Run())
}

// The cluster forms: every node is routed to the others, and an R3
// stream gets a leader and two current replicas, one on each node.
func TestClusterForms(t *testing.T) {
	c := meshtest.StartCluster(t, 3)
	for i := range c.Len() {
		srv := c.Server(i)
		if got := srv.NATS().Name(); got != meshtest.NodeName(i) {
			t.Fatalf("node %d is named %q, want %q", i, got, meshtest.NodeName(i))
		}
		if srv.ClusterURL() == "" {
			t.Fatalf("node %d has no route address", i)
		}
		if srv.ClientURL() != c.URLs()[i] {
			t.Fatalf("node %d listens on %s, URLs() says %s", i, srv.ClientURL(), c.URLs()[i])
		}
	}
	js := jetStream(t, c.Connect())
	createR3(t, js)
	c.WaitStreamCurrent("orders")
	si := info(t, js, "orders")
	on := []string{si.Cluster.Leader}
	for _, p := range si.Cluster.Replicas {
		on = append(on, p.Name)
	}
	slices.Sort(on)
	if want := []string{"n0", "n1", "n2"}; !slices.Equal(on, want) {
		t.Fatalf("R3 stream is on %v, want one copy on each of %v", on, want)
	}
}

// An R3 stream and an R3 KV bucket keep accepting writes while one node
// is down, and after it restarts every acknowledged write is there once,
// served by the restarted node as leader (so its own store has them all).
// Rows: the killed node holds no leader of either, or the leaders of
// both; killed with SIGKILL (process nodes) or shut down (in-process).
func TestClusterSurvivesNodeLoss(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		start  func(testing.TB, int) *meshtest.Cluster
		leader bool
	}{
		{"in-process, follower shut down", meshtest.StartCluster, false},
		{"process, follower SIGKILLed", meshtest.StartProcessCluster, false},
		{"process, leader SIGKILLed", meshtest.StartProcessCluster, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // a SIGKILLed leader's successor is elected after seconds of waiting, not work
			c := tc.start(t, 3)
			js := jetStream(t, c.Connect())
			createR3(t, js)
			var kv jetstream.KeyValue
			retry(t, "create R3 bucket", func(ctx context.Context) (err error) {
				kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "state", Replicas: 3, Storage: jetstream.FileStorage})
				return err
			})
			c.WaitStreamCurrent("orders")
			c.WaitStreamCurrent("KV_state")

			victim := c.StreamLeader("orders")
			if tc.leader {
				c.MoveStreamLeader("KV_state", victim)
			} else {
				victim = (victim + 1) % c.Len()
				c.MoveStreamLeader("KV_state", (victim+1)%c.Len())
			}
			w := &writes{js: js, kv: kv, acked: map[string]uint64{}, keys: map[string]string{}}
			w.write(t, 0, 20)

			c.Kill(victim)
			w.write(t, 20, 40) // retried until acknowledged: a new leader takes over
			if got := c.StreamLeader("orders"); got == victim {
				t.Fatalf("stream leader is the killed node %d", victim)
			}

			c.Restart(victim)
			c.WaitStreamCurrent("orders")
			c.WaitStreamCurrent("KV_state")
			c.MoveStreamLeader("orders", victim)
			c.MoveStreamLeader("KV_state", victim)
			w.check(t)
		})
	}
}

// A client given every node's URL fails over when the node it is
// connected to dies, and its JetStream publishes go on.
func TestClientFailsOver(t *testing.T) {
	t.Parallel()
	c := meshtest.StartProcessCluster(t, 3)
	reconnected := make(chan string, 4)
	nc := c.Connect(nats.ReconnectHandler(func(nc *nats.Conn) { reconnected <- nc.ConnectedServerName() }))
	js := jetStream(t, nc)
	createR3(t, js)
	first := c.Index(nc.ConnectedServerName())
	if first < 0 {
		t.Fatalf("connected to %q, not a node of the cluster", nc.ConnectedServerName())
	}
	c.Kill(first)
	select {
	case name := <-reconnected:
		if c.Index(name) == first || c.Index(name) < 0 {
			t.Fatalf("reconnected to %q after node %d was killed", name, first)
		}
	case <-time.After(meshtest.ClusterWait):
		t.Fatalf("no reconnect within %v after node %d was killed", meshtest.ClusterWait, first)
	}
	w := &writes{js: js, acked: map[string]uint64{}}
	w.write(t, 0, 5)
	w.check(t)
}

func jetStream(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// retry runs a JetStream request with 2s per attempt until it succeeds:
// while a leader changes, a request may be refused or get no answer.
func retry(t *testing.T, what string, try func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(meshtest.ClusterWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := try(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// createR3 creates the R3 stream "orders", retrying until the cluster
// places it.
func createR3(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	retry(t, "create R3 stream", func(ctx context.Context) error {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name: "orders", Subjects: []string{"orders.>"}, Replicas: 3, Storage: jetstream.FileStorage,
		})
		return err
	})
}

// info is the stream's info, read until it answers.
func info(t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	var si *jetstream.StreamInfo
	retry(t, "stream "+name, func(ctx context.Context) error {
		s, err := js.Stream(ctx, name)
		if err == nil {
			si = s.CachedInfo()
		}
		return err
	})
	return si
}

// writes publishes numbered messages to the orders stream (and puts
// numbered keys in kv, when set), each retried until acknowledged, and
// remembers what was acknowledged.
type writes struct {
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	acked map[string]uint64 // message id → stream sequence
	keys  map[string]string // key → last acknowledged value
}

// write writes messages from..to-1, each retried until it is
// acknowledged: while a new leader is elected a publish fails, and the
// message id keeps a retried publish from storing a second copy.
func (w *writes) write(t *testing.T, from, to int) {
	t.Helper()
	deadline := time.Now().Add(meshtest.ClusterWait)
	for i := from; i < to; i++ {
		id := "m" + strconv.Itoa(i)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := w.once(ctx, i, id)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("write %d not acknowledged within %v: %v", i, meshtest.ClusterWait, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func (w *writes) once(ctx context.Context, i int, id string) error {
	ack, err := w.js.Publish(ctx, "orders.new", []byte(id), jetstream.WithMsgID(id))
	if err != nil {
		return err
	}
	if prev, ok := w.acked[id]; ok && prev != ack.Sequence {
		return fmt.Errorf("message %s acknowledged as sequence %d and %d", id, prev, ack.Sequence)
	}
	w.acked[id] = ack.Sequence
	if w.kv == nil {
		return nil
	}
	key, val := "k"+strconv.Itoa(i%7), id
	if _, err := w.kv.Put(ctx, key, []byte(val)); err != nil {
		return err
	}
	w.keys[key] = val
	return nil
}

// check reads every acknowledged message at its sequence and every key's
// last acknowledged value, and finds no message stored twice.
func (w *writes) check(t *testing.T) {
	t.Helper()
	var s jetstream.Stream
	retry(t, "stream orders", func(ctx context.Context) (err error) { s, err = w.js.Stream(ctx, "orders"); return err })
	for id, seq := range w.acked {
		retry(t, fmt.Sprintf("acknowledged message %s (sequence %d)", id, seq), func(ctx context.Context) error {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				return err
			}
			if string(m.Data) != id {
				t.Fatalf("sequence %d holds %q, want %q", seq, m.Data, id)
			}
			return nil
		})
	}
	if n := s.CachedInfo().State.Msgs; n != uint64(len(w.acked)) {
		t.Fatalf("stream holds %d messages, %d were written once each", n, len(w.acked))
	}
	for key, want := range w.keys {
		retry(t, "key "+key, func(ctx context.Context) error {
			e, err := w.kv.Get(ctx, key)
			if err != nil {
				return err
			}
			if string(e.Value()) != want {
				t.Fatalf("key %s = %q, want the last acknowledged %q", key, e.Value(), want)
			}
			return nil
		})
	}
}
