package embednats_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/embednats"
)

// TestNoQuorum: with 2 of 3 cluster nodes gone, the survivor is not
// Ready and says it lost its quorum, and a publish to an R3 stream fails
// at once instead of waiting out its timeout. Quorum, nil while a
// majority is routed (one node lost: an election ends with a leader),
// says the survivor has no quorum.
func TestNoQuorum(t *testing.T) {
	srvs := cluster(t, freePorts(t, 3), func(i int, c *embednats.Config) {
		c.DataDir, c.JetStream = t.TempDir(), true
	})
	waitRouted(t, srvs)
	nc, err := srvs[0].Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	await(t, "a stream created with 3 replicas", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := js.CreateStream(cctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3})
		return err == nil
	})
	await(t, "a first publish", func() bool {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := js.Publish(pctx, "r3.a", []byte("x"))
		return err == nil
	})
	await(t, "every node ready", func() bool {
		for _, s := range srvs {
			if s.Ready() != nil {
				return false
			}
		}
		return true
	})
	for i, s := range srvs {
		if err := s.Quorum(); err != nil {
			t.Fatalf("node %d: Quorum = %v with every node up", i, err)
		}
	}

	for i, s := range srvs[1:] {
		if err := s.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			await(t, "the lost node's route gone", func() bool { return srvs[0].NATS().NumRemotes() == 1 })
			if err := srvs[0].Quorum(); err != nil {
				t.Fatalf("Quorum = %v with two of three nodes up, want nil (a leader can be elected)", err)
			}
		}
	}
	// The survivor learns of the second loss when its route closes.
	await(t, "the last lost node's route gone", func() bool { return srvs[0].NATS().NumRemotes() == 0 })
	if qerr := srvs[0].Quorum(); !errors.Is(qerr, embednats.ErrNotReady) || !strings.Contains(qerr.Error(), "no quorum: this node reaches 1 of the cluster's 3 nodes") {
		t.Fatalf("survivor Quorum = %v, want ErrNotReady saying it reaches 1 of 3 nodes", qerr)
	}
	await(t, "the survivor not ready", func() bool { return srvs[0].Ready() != nil })
	rerr := srvs[0].Ready()
	if !errors.Is(rerr, embednats.ErrNotReady) || !strings.Contains(rerr.Error(), "quorum") {
		t.Fatalf("survivor Ready = %v, want ErrNotReady naming the lost quorum", rerr)
	}
	t.Logf("survivor: %v", rerr)
	// A stream leader on the survivor keeps its leadership until its raft
	// group notices the lost quorum (seconds, more on a loaded machine);
	// a publish it takes meanwhile is proposed and never answered. Wait
	// for the step-down: from then on every publish fails at once.
	stepDown := time.Now().Add(90 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.Publish(pctx, "r3.b", []byte("y"))
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			break
		}
		if time.Now().After(stepDown) {
			t.Fatalf("publish without quorum still times out (%v): the stream leader never stepped down", err)
		}
	}
	for i := range 3 {
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		start := time.Now()
		_, err := js.Publish(pctx, "r3.b", []byte("y"))
		cancel()
		t.Logf("publish %d without quorum: %v after %v", i, err, time.Since(start).Round(time.Millisecond))
		if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			t.Fatalf("publish without quorum: %v, want an error at once", err)
		}
	}
}
