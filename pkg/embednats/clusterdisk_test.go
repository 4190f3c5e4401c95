//go:build !race

// This test re-enables JetStream on a node of a running cluster (the storage
// guard's heal), and nats-server v2.15.2's EnableJetStream replaces the
// routed-API queues (setJetStreamExportSubs) while route readers use them:
// a data race inside nats-server that the race detector reports at random.
// So it runs without -race, in `make test`'s second step (test-norace).

package embednats_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/tmpfstest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/embednats"
)

// TestClusterNodeDiskFull: one node of a 3-node cluster runs out of disk
// (its data dir alone on a 32 MiB tmpfs, filled to the brim). Its
// storage guard stops its JetStream, it is not Ready and says why, and
// publishes to an R3 stream go on through the other two nodes, from a
// client of a healthy node and from a client of the full one; none
// times out once the stream has a leader on a healthy node. Once space
// returns the node starts JetStream again by itself, rejoins, and catches
// up: made the stream's leader, it serves every message acknowledged
// before, during and after the fault.
func TestClusterNodeDiskFull(t *testing.T) {
	vol := tmpfstest.Mount(t, 32<<20)
	const full = 2
	srvs := cluster(t, freePorts(t, 3), func(i int, c *embednats.Config) {
		c.DataDir, c.JetStream, c.MaxPayload = t.TempDir(), true, embednats.MinMaxPayload
		c.StorageCheck = 100 * time.Millisecond
		if i == full {
			c.DataDir, c.MinFreeBytes = vol, 2<<20
		}
	})
	waitRouted(t, srvs)
	ctx := context.Background()
	type client struct {
		nc *nats.Conn
		js jetstream.JetStream
	}
	clients := make([]client, 3)
	for i, s := range srvs {
		nc, err := s.Connect(nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, _ := jetstream.New(nc)
		clients[i] = client{nc, js}
	}
	healthy := clients[0].js
	await(t, "a stream created with 3 replicas", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := healthy.CreateStream(cctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3})
		return err == nil
	})
	acked := map[uint64]string{}
	n := 0
	publish := func(js jetstream.JetStream, wait time.Duration) error {
		pctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		n++
		data := fmt.Sprintf("msg-%d-%s", n, strings.Repeat("x", 1000))
		ack, err := js.Publish(pctx, fmt.Sprintf("s.%d", n), []byte(data))
		if err == nil {
			acked[ack.Sequence] = data
		}
		return err
	}
	await(t, "a first publish", func() bool { return publish(healthy, 5*time.Second) == nil })
	for range 20 {
		if err := publish(healthy, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	await(t, "every node ready", func() bool {
		for _, s := range srvs {
			if s.Ready() != nil {
				return false
			}
		}
		return true
	})

	filler := tmpfstest.Fill(t, vol)
	await(t, "the full node not ready", func() bool { return srvs[full].Ready() != nil })
	rerr := srvs[full].Ready()
	if !errors.Is(rerr, embednats.ErrNotReady) || !strings.Contains(rerr.Error(), "disk full") {
		t.Fatalf("full node: Ready = %v, want ErrNotReady naming the full disk", rerr)
	}
	t.Logf("full node: %v", rerr)
	// The others stay (or, when the full node led the meta group, are
	// once more after an election) ready.
	for i, s := range srvs[:full] {
		await(t, fmt.Sprintf("node %d, with room on its disk, ready", i), func() bool { return s.Ready() == nil })
	}
	// The stream had a leader on the full node, or loses a replica: once
	// a healthy node leads it, publishes from a client of any node are
	// stored by the other two, each at once.
	await(t, "the stream led by a healthy node", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		st, err := healthy.Stream(cctx, "S")
		if err != nil {
			return false
		}
		l := st.CachedInfo().Cluster.Leader
		return l != "" && l != srvs[full].NATS().Name()
	})
	for i, c := range clients {
		await(t, fmt.Sprintf("a publish from a client of node %d", i), func() bool { return publish(c.js, 5*time.Second) == nil })
		for range 10 {
			if err := publish(c.js, 20*time.Second); err != nil {
				t.Fatalf("publish from a client of node %d while node %d is full: %v", i, full, err)
			}
		}
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	await(t, "the full node ready again", func() bool { return srvs[full].Ready() == nil })
	for range 10 {
		await(t, "a publish after the heal", func() bool { return publish(healthy, 5*time.Second) == nil })
	}
	// Caught up: the node that was full becomes the stream's leader and
	// serves every acknowledged message.
	name := srvs[full].NATS().Name()
	await(t, "the healed node leads the stream", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		st, err := healthy.Stream(cctx, "S")
		if err != nil {
			return false
		}
		if st.CachedInfo().Cluster.Leader == name {
			return true
		}
		body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": name}})
		_, _ = clients[0].nc.RequestWithContext(cctx, "$JS.API.STREAM.LEADER.STEPDOWN.S", body)
		return false
	})
	st, err := healthy.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	for seq, data := range acked {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("acknowledged message %d from the healed leader: %v, want it kept", seq, err)
		}
		if string(m.Data) != data {
			t.Fatalf("acknowledged message %d holds %.20q, want %.20q", seq, m.Data, data)
		}
	}
	t.Logf("%d acknowledged messages all served by the healed node", len(acked))
}
