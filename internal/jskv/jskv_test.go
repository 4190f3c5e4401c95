package jskv_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/jskv"
	"github.com/utpmesh/utpmesh/internal/jskv/jskvtest"
	"github.com/utpmesh/utpmesh/internal/meshtest"
)

// TestLatest: the leader read reports absent keys, values and delete
// markers with the revision a compare-and-set must name.
func TestLatest(t *testing.T) {
	ctx := context.Background()
	js, err := jetstream.New(meshtest.Conn(t, meshtest.NATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := jskv.Open(ctx, js, jskv.Config{Bucket: "t", History: 2})
	if err != nil {
		t.Fatal(err)
	}
	if e, err := b.Latest(ctx, "a.b"); err != nil || e.Exists || e.Revision != 0 || e.Value != nil {
		t.Fatalf("absent key = %+v, %v", e, err)
	}
	rev, err := b.KV.Update(ctx, "a.b", []byte("v1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := b.Latest(ctx, "a.b"); err != nil || !e.Exists || e.Revision != rev || string(e.Value) != "v1" {
		t.Fatalf("after put = %+v, %v; want v1 at %d", e, err, rev)
	}
	if err := b.KV.Delete(ctx, "a.b", jetstream.LastRevision(rev)); err != nil {
		t.Fatal(err)
	}
	e, err := b.Latest(ctx, "a.b")
	if err != nil || e.Exists || e.Revision <= rev || e.Value != nil {
		t.Fatalf("after delete = %+v, %v", e, err)
	}
	// The delete marker's revision is what a re-create names.
	if _, err := b.KV.Update(ctx, "a.b", []byte("v2"), e.Revision); err != nil {
		t.Fatalf("re-create on the delete marker's revision: %v", err)
	}
	if _, err := b.KV.Update(ctx, "a.b", []byte("v3"), e.Revision); !jskv.Conflict(err) {
		t.Fatalf("stale revision = %v, want a conflict", err)
	}
	if err := b.KV.Purge(ctx, "a.b"); err != nil {
		t.Fatal(err)
	}
	if e, err := b.Latest(ctx, "a.b"); err != nil || e.Exists {
		t.Fatalf("after purge = %+v, %v", e, err)
	}
}

func TestCAS(t *testing.T) {
	ctx := context.Background()
	n := 0
	err := jskv.CAS(ctx, "x", func() error {
		if n++; n < 3 {
			return jetstream.ErrKeyRevisionMismatch
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("CAS = %v after %d attempts, want nil after 3", err, n)
	}
	boom := errors.New("boom")
	n = 0
	if err := jskv.CAS(ctx, "x", func() error { n++; return boom }); !errors.Is(err, boom) || n != 1 {
		t.Fatalf("CAS with a non-conflict error = %v after %d attempts", err, n)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := jskv.CAS(cctx, "x", func() error { return jetstream.ErrKeyExists }); !errors.Is(err, context.Canceled) {
		t.Fatalf("CAS on a canceled context = %v", err)
	}
}

func TestOpenRefuses(t *testing.T) {
	ctx := context.Background()
	js, err := jetstream.New(meshtest.Conn(t, meshtest.NATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		cfg  jskv.Config
		want string
	}{
		{jskv.Config{Bucket: "a", Replicas: 3}, "set replicas to 1, or add nodes"},
		{jskv.Config{Bucket: "a", Replicas: -1}, "use 1 (single server) or 3 (cluster)"},
		{jskv.Config{Bucket: "a", History: 65}, "1 to 64 revisions"},
		{jskv.Config{Bucket: "a.b"}, `bucket name "a.b": use letters, digits, _ and - only`},
		{jskv.Config{}, `bucket name "": use letters`},
	}
	for _, tc := range tests {
		if _, err := jskv.Open(ctx, js, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestScan: the leader walk sees every kept message of the matching keys
// in revision order, delete markers included, and no other key.
func TestScan(t *testing.T) {
	ctx := context.Background()
	js, err := jetstream.New(meshtest.Conn(t, meshtest.NATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := jskv.Open(ctx, js, jskv.Config{Bucket: "s", History: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{{"p.x", "1"}, {"p-1.x", "other"}, {"p.y", "1"}, {"p.x", "2"}, {"p.x", "3"}, {"px.z", "other"}} {
		if _, err := b.KV.Put(ctx, kv[0], []byte(kv[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.KV.Delete(ctx, "p.y"); err != nil {
		t.Fatal(err)
	}
	var got []string
	err = b.Scan(ctx, "p.>", func(key string, e jskv.Entry) error {
		got = append(got, fmt.Sprintf("%s=%s/%v", key, e.Value, e.Exists))
		return nil
	})
	// History 2: p.x keeps 2 and 3; p.y keeps its value and the marker.
	if want := "p.y=1/true p.x=2/true p.x=3/true p.y=/false"; err != nil || strings.Join(got, " ") != want {
		t.Fatalf("Scan = %v, %v; want %s", got, err, want)
	}
	if err := b.Scan(ctx, "none.>", func(string, jskv.Entry) error { return errors.New("called") }); err != nil {
		t.Fatalf("Scan of no keys = %v", err)
	}
	stop := errors.New("stop")
	if err := b.Scan(ctx, "p.>", func(string, jskv.Entry) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("Scan with a failing fn = %v", err)
	}
}

// TestScanLatest: the keys of a pattern come from the stream leader's
// subject list, each with its latest revision (a delete marker as
// Exists false), in key order; other keys are left out.
func TestScanLatest(t *testing.T) {
	ctx := context.Background()
	js, err := jetstream.New(meshtest.Conn(t, meshtest.NATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	opened, err := jskv.Open(ctx, js, jskv.Config{Bucket: "sl", History: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Bound over the existing bucket, as an identity that manages no
	// stream does.
	b, err := jskv.Bind(js, opened.KV, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{{"p.x", "1"}, {"p-1.x", "other"}, {"p.y", "1"}, {"p.x", "2"}, {"p.x", "3"}, {"px.z", "other"}} {
		if _, err := b.KV.Put(ctx, kv[0], []byte(kv[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.KV.Delete(ctx, "p.y"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 300} { // a few keys, then more than ScanParallel
		for i := range n {
			if _, err := b.KV.Put(ctx, fmt.Sprintf("q.k%03d", i), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct{ filter, want string }{
			{"p.>", "p.x=3/true p.y=/false"},
			{"none.>", ""},
		} {
			var got []string
			err := b.ScanLatest(ctx, tc.filter, func(key string, e jskv.Entry) error {
				got = append(got, fmt.Sprintf("%s=%s/%v", key, e.Value, e.Exists))
				return nil
			})
			if err != nil || strings.Join(got, " ") != tc.want {
				t.Fatalf("ScanLatest(%s) = %v, %v; want %s", tc.filter, got, err, tc.want)
			}
		}
		keys, err := b.Keys(ctx, "q.*")
		if err != nil || len(keys) != n {
			t.Fatalf("Keys(q.*) = %d keys, %v; want %d", len(keys), err, n)
		}
		seen := 0
		if err := b.ScanLatest(ctx, "q.*", func(key string, e jskv.Entry) error {
			if key != keys[seen] || !e.Exists || string(e.Value) != "v" {
				return fmt.Errorf("key %d = %s %+v, want %s=v", seen, key, e, keys[seen])
			}
			seen++
			return nil
		}); err != nil || seen != n {
			t.Fatalf("ScanLatest(q.*) saw %d keys, %v; want %d", seen, err, n)
		}
	}
	stop := errors.New("stop")
	if err := b.ScanLatest(ctx, "p.>", func(string, jskv.Entry) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("ScanLatest with a failing fn = %v", err)
	}
	if _, err := jskv.Bind(js, opened.KV, -time.Second); err == nil || !strings.Contains(err.Error(), "use a positive duration") {
		t.Fatalf("Bind with a negative timeout = %v, want an error saying what to use", err)
	}
}

// TestOpenConcurrently: nodes starting at once all open the same new
// bucket.
func TestOpenConcurrently(t *testing.T) {
	srv := meshtest.NATS(t)
	var wg sync.WaitGroup
	for range 4 {
		js, err := jetstream.New(meshtest.Conn(t, srv))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if _, err := jskv.Open(context.Background(), js, jskv.Config{Bucket: "shared", History: 5}); err != nil {
				t.Errorf("Open: %v", err)
			}
		})
	}
	wg.Wait()
}

// TestReadWithoutLeaderReturns: in a 3-node cluster whose bucket lost its
// stream leader and its quorum (the leader and one follower stopped), a
// leader read through the surviving follower, with a context that has no
// deadline, returns an error instead of waiting for an answer that never
// comes (cluster mode once hung a policy read for 33 minutes here).
func TestReadWithoutLeaderReturns(t *testing.T) {
	c := jskvtest.Start(t)
	ctx := context.Background()
	survivor := followerOf(t, c, "stall")
	// The survivor's client, then the bucket opened through it (the
	// bucket exists: Open only reads its configuration back).
	sb, err := jskv.Open(ctx, c.JetStream(t, survivor), jskv.Config{Bucket: "stall", Replicas: 3, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range c.Servers {
		if i != survivor {
			s.Shutdown()
			s.WaitForShutdown()
		}
	}
	// The nodes stop one after the other: the two left after the first
	// may elect the survivor the stream's leader, and a leader answers
	// reads from its own copy until its raft group notices the lost quorum
	// and steps down (seconds; longer on a loaded machine). The read
	// without a leader is the case under test: wait for the step-down.
	waitStepDown(t, c, survivor, "KV_stall")
	if _, err := sb.Latest(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Latest without a stream leader = %v, want context.DeadlineExceeded", err)
	}
	if err := sb.Scan(ctx, ">", func(string, jskv.Entry) error { return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Scan without a stream leader = %v, want context.DeadlineExceeded", err)
	}
	// The key list is the leader's too: without one it fails (timed out,
	// or refused by the node), it does not answer from a stale copy.
	if err := sb.ScanLatest(ctx, ">", func(string, jskv.Entry) error { return nil }); err == nil {
		t.Fatal("ScanLatest without a stream leader succeeded")
	}
}

// TestReadAsksAgainUntilALeaderIsBack: a leader read asked while its
// bucket has no leader (two of three nodes stopped) is sent again, one
// attempt after another, and answered once a node comes back and a leader
// is elected, within the read's deadline; before, the one request sent
// during the election waited out the caller's whole deadline, which turned
// a node's loss into calls stalled for their whole timeout.
func TestReadAsksAgainUntilALeaderIsBack(t *testing.T) {
	c := jskvtest.Start(t)
	ctx := context.Background()
	survivor := followerOf(t, c, "again")
	sb, err := jskv.Open(ctx, c.JetStream(t, survivor), jskv.Config{Bucket: "again", Replicas: 3, Attempt: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Count the read's requests as the survivor sees them.
	watch := c.Conn(t, survivor)
	reqs, err := watch.SubscribeSync("$JS.API.STREAM.MSG.GET.KV_again")
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	var stopped []int
	for i := range c.Servers {
		if i != survivor {
			c.Stop(i)
			stopped = append(stopped, i)
		}
	}
	// As in TestReadWithoutLeaderReturns: the two nodes left after the
	// first stop may have elected the survivor, which then answers the
	// read from its own copy until it steps down; the read without a
	// leader is the case under test.
	waitStepDown(t, c, survivor, "KV_again")
	type result struct {
		e   jskv.Entry
		err error
	}
	done := make(chan result, 1)
	go func() {
		// A generous bound: the read must end by being answered, long
		// before it.
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		e, err := sb.Latest(rctx, "k")
		done <- result{e, err}
	}()
	// Two requests seen: the read asked, got no answer and asked again,
	// all while the bucket had no leader.
	for range 2 {
		if _, err := reqs.NextMsg(time.Minute); err != nil {
			t.Fatalf("waiting for the read's attempts: %v", err)
		}
	}
	c.Restart(t, stopped[0])
	r := <-done
	if r.err != nil || string(r.e.Value) != "v" {
		t.Fatalf("Latest across a leader election = %q, %v; want v", r.e.Value, r.err)
	}
}

// waitStepDown waits until node i does not lead stream (a leader that
// lost its quorum steps down after seconds; longer on a loaded machine).
func waitStepDown(t *testing.T, c *jskvtest.Cluster, i int, stream string) {
	t.Helper()
	acc := c.Servers[i].GlobalAccount().Name
	for stepDown := time.Now().Add(90 * time.Second); c.Servers[i].JetStreamIsStreamLeader(acc, stream); {
		if time.Now().After(stepDown) {
			t.Fatalf("node %d still leads %s without a quorum", i, stream)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// followerOf makes bucket with 3 replicas through node 0, puts key "k" in
// it, and returns the index of a node that does not lead its stream.
func followerOf(t *testing.T, c *jskvtest.Cluster, bucket string) int {
	t.Helper()
	ctx := context.Background()
	b, err := jskv.Open(ctx, c.JetStream(t, 0), jskv.Config{Bucket: bucket, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.KV.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	info, err := b.KV.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := info.(*jetstream.KeyValueBucketStatus).StreamInfo().Cluster.Leader
	for i, s := range c.Servers {
		if s.Name() != leader {
			return i
		}
	}
	t.Fatalf("bucket %s: every node leads it", bucket)
	return -1
}
