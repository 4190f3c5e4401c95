package inbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/internal/jskv/jskvtest"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// The backend conformance suite: every way the inbox keeps its entries
// (the bbolt file, a JetStream key-value bucket on one server, the same
// bucket replicated on a 3-node cluster) must behave the same.

type backendFactory func(t *testing.T) backend

func boltBackend(t *testing.T) backend {
	d, err := openDB(filepath.Join(t.TempDir(), "inbox.db"), time.Second)
	must(t, err)
	t.Cleanup(func() {
		_ = d.close()
		checkFile(t, d.path)
	})
	return d
}

func kvBackendOn(t *testing.T, js jetstream.JetStream, replicas int) backend {
	bk, err := OpenBucket(context.Background(), js, fmt.Sprintf("inbox_%d", time.Now().UnixNano()), replicas)
	must(t, err)
	b := newKVBackend(bk)
	t.Cleanup(func() { _ = b.close() })
	return b
}

func kvBackendR1(t *testing.T) backend {
	srv := meshtest.NATS(t)
	js, err := jetstream.New(meshtest.Conn(t, srv))
	must(t, err)
	return kvBackendOn(t, js, 1)
}

func TestBackendConformance(t *testing.T) {
	for _, bc := range []struct {
		name string
		new  backendFactory
	}{
		{"bbolt", boltBackend},
		{"kv-R1", kvBackendR1},
	} {
		t.Run(bc.name, func(t *testing.T) { runBackendSuite(t, bc.new) })
	}
}

// TestBackendConformanceR3 runs the suite on a bucket replicated on three
// servers, each operation through a connection to a different node.
func TestBackendConformanceR3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := jskvtest.Start(t)
	runBackendSuite(t, func(t *testing.T) backend { return kvBackendOn(t, c.JetStream(t, 0), 3) })
}

func rep(turn, call string, epoch int64) *utp.Report {
	return &utp.Report{AgentID: "agent-a", AgentTurnID: turn, ToolCallID: call, TurnEpoch: epoch,
		ToolResultCardID: card.NewID(), Status: card.StatusSuccess, AfterExecution: card.Suspend, StepID: "s1", ToolName: "echo"}
}

func runBackendSuite(t *testing.T, newBackend backendFactory) {
	t.Run("insert, duplicate, get, list", func(t *testing.T) {
		b := newBackend(t)
		e, out, err := b.insert("p1", "c1", rep("turn-1", "call-1", 1), "tp")
		must(t, err)
		if out != outcomeNew || e.State != StatePending || e.InboxID == "" || e.Traceparent != "tp" || e.ChannelID != "c1" {
			t.Fatalf("insert = %+v, %v", e, out)
		}
		again, out, err := b.insert("p1", "c1", rep("turn-1", "call-1", 1), "tp")
		must(t, err)
		if out != outcomeDuplicate || again.InboxID != e.InboxID {
			t.Fatalf("duplicate = %+v, %v; want the same entry", again, out)
		}
		got, err := b.get("p1", e.InboxID)
		must(t, err)
		if got.ToolCallID != "call-1" || got.State != StatePending {
			t.Fatalf("get = %+v", got)
		}
		if _, err := b.get("p2", e.InboxID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get from another project: err = %v, want ErrNotFound", err)
		}
		es, err := b.list("p1", ListQuery{AgentID: "agent-a", State: StatePending, Limit: MaxList})
		must(t, err)
		if len(es) != 1 || es[0].InboxID != e.InboxID {
			t.Fatalf("list = %+v", es)
		}
		if es, err := b.list("p2", ListQuery{AgentID: "agent-a", State: StateAll, Limit: MaxList}); err != nil || len(es) != 0 {
			t.Fatalf("list of another project = %+v, %v", es, err)
		}
		n, err := b.pending()
		must(t, err)
		if n != 1 {
			t.Fatalf("pending = %d, want 1", n)
		}
	})

	t.Run("epochs and stale", func(t *testing.T) {
		b := newBackend(t)
		old, _, err := b.insert("p1", "c1", rep("turn-1", "call-1", 1), "")
		must(t, err)
		// A report never raises the epoch (only set_epoch does): an entry
		// of a lower epoch after one of epoch 3 is pending still.
		_, _, err = b.insert("p1", "c1", rep("turn-1", "call-2", 3), "")
		must(t, err)
		lower, out, err := b.insert("p1", "c1", rep("turn-1", "call-3", 2), "")
		must(t, err)
		if out != outcomeNew || lower.State != StatePending {
			t.Fatalf("epoch 2 after a report of epoch 3 (no set_epoch): %+v, %v; want pending", lower, out)
		}
		// set_epoch makes the pending entries of older epochs stale, and
		// never lowers the epoch.
		h, staled, err := b.setEpoch("p1", "turn-1", 4)
		must(t, err)
		if h != 4 || len(staled) != 3 {
			t.Fatalf("setEpoch 4 = %d, %d staled; want 4 and the three pending entries of older epochs", h, len(staled))
		}
		stale, out, err := b.insert("p1", "c1", rep("turn-1", "call-4", 2), "")
		must(t, err)
		if out != outcomeStale || stale.State != StateStale {
			t.Fatalf("older epoch after set_epoch 4: %+v, %v; want stale", stale, out)
		}
		got, err := b.get("p1", old.InboxID)
		must(t, err)
		if got.State != StateStale {
			t.Fatalf("entry of epoch 1 after set_epoch 4: %s", got.State)
		}
		h, staled, err = b.setEpoch("p1", "turn-1", 2)
		must(t, err)
		if h != 4 || len(staled) != 0 {
			t.Fatalf("setEpoch 2 = %d, %v; want 4 unchanged", h, staled)
		}
		if es, _ := b.list("p1", ListQuery{AgentID: "agent-a", State: StatePending, Limit: MaxList}); len(es) != 0 {
			t.Fatalf("pending after set_epoch = %+v", es)
		}
		// A report of a huge epoch (any worker may report) does not raise
		// the turn's epoch: the turn's later results still wake.
		_, _, err = b.insert("p1", "c1", rep("turn-1", "call-5", math.MaxInt64), "")
		must(t, err)
		if e, out, err := b.insert("p1", "c1", rep("turn-1", "call-6", 4), ""); err != nil || out != outcomeNew {
			t.Fatalf("epoch 4 after a report of epoch MaxInt64: %+v, %v, %v; want a new pending entry", e, out, err)
		}
	})

	t.Run("a lazy ack counts once", func(t *testing.T) {
		b := newBackend(t)
		e, _, err := b.insert("p1", "c1", rep("turn-l", "call-1", 0), "")
		must(t, err)
		now := time.Now()
		for i, want := range []int{1, 0} {
			n, err := b.ackLater("p1", []string{e.InboxID}, now, nil)
			must(t, err)
			if n != want {
				t.Fatalf("lazy ack %d of one entry = %d, want %d (only the first finds it pending)", i+1, n, want)
			}
		}
		if n, err := b.ack("p1", []string{e.InboxID}, now); err != nil || n != 0 {
			t.Fatalf("ack after the lazy ack = %d, %v; want 0", n, err)
		}
	})

	t.Run("a duplicate does not raise the epoch", func(t *testing.T) {
		b := newBackend(t)
		first, out, err := b.insert("p1", "c1", rep("turn-d", "call-1", 1), "")
		must(t, err)
		if out != outcomeNew {
			t.Fatalf("first report: %v", out)
		}
		// The same call reported again at a higher epoch (a re-made call's
		// worker re-reports the existing result with the new command's
		// epoch): a duplicate, whatever its epoch.
		dup, out, err := b.insert("p1", "c1", rep("turn-d", "call-1", 5), "")
		must(t, err)
		if out != outcomeDuplicate || dup.InboxID != first.InboxID {
			t.Fatalf("duplicate at epoch 5: %v, %s; want the first entry %s", out, dup.InboxID, first.InboxID)
		}
		e, out, err := b.insert("p1", "c1", rep("turn-d", "call-2", 2), "")
		must(t, err)
		if out != outcomeNew || e.State != StatePending {
			t.Fatalf("report at epoch 2 after a duplicate at 5: %v, %s; want a new pending entry (the turn's epoch is 1)", out, e.State)
		}
	})

	t.Run("ack all or none", func(t *testing.T) {
		b := newBackend(t)
		e1, _, _ := b.insert("p1", "c1", rep("turn-1", "call-1", 0), "")
		e2, _, _ := b.insert("p1", "c1", rep("turn-1", "call-2", 0), "")
		unknown := card.NewID()
		if _, err := b.ack("p1", []string{e1.InboxID, unknown}, time.Now()); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ack with an unknown id: err = %v", err)
		}
		if got, _ := b.get("p1", e1.InboxID); got.State != StatePending {
			t.Fatalf("a failed ack changed %s to %s", e1.InboxID, got.State)
		}
		n, err := b.ack("p1", []string{e1.InboxID, e2.InboxID}, time.Now())
		must(t, err)
		if n != 2 {
			t.Fatalf("ack = %d, want 2", n)
		}
		n, err = b.ack("p1", []string{e1.InboxID}, time.Now())
		must(t, err)
		if n != 0 {
			t.Fatalf("re-ack = %d, want 0", n)
		}
		got, _ := b.get("p1", e1.InboxID)
		if got.State != StateAcked || got.AckedAt == nil {
			t.Fatalf("acked entry = %+v", got)
		}
		if es, _ := b.list("p1", ListQuery{AgentID: "agent-a", State: StatePending, Limit: MaxList}); len(es) != 0 {
			t.Fatalf("pending after ack = %+v", es)
		}
		if n, _ := b.pending(); n != 0 {
			t.Fatalf("pending() after ack = %d", n)
		}
	})

	t.Run("lazy ack", func(t *testing.T) {
		b := newBackend(t)
		e, _, _ := b.insert("p1", "c1", rep("turn-1", "call-1", 0), "")
		done := make(chan error, 1)
		n, err := b.ackLater("p1", []string{e.InboxID}, time.Now(), func(err error) { done <- err })
		must(t, err)
		if n != 1 {
			t.Fatalf("ackLater = %d, want 1", n)
		}
		if got, _ := b.get("p1", e.InboxID); got.State != StateAcked {
			t.Fatalf("read after a lazy ack: %s, want acked", got.State)
		}
		select {
		case err := <-done:
			must(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("lazy ack not written within 10s")
		}
	})

	t.Run("wakeup mark once", func(t *testing.T) {
		b := newBackend(t)
		e, _, _ := b.insert("p1", "c1", rep("turn-1", "call-1", 0), "")
		firsts := make(chan bool, 2)
		for range 2 {
			b.markSentLater("p1", e.InboxID, time.Now(), func(first bool, err error) {
				must(t, err)
				firsts <- first
			})
		}
		if d, ok := b.(*db); ok {
			must(t, d.update(func(*bolt.Tx) error { return nil }))
		}
		a, c := <-firsts, <-firsts
		if a == c {
			t.Fatalf("first = %v and %v, want exactly one", a, c)
		}
		got, _ := b.get("p1", e.InboxID)
		if got.WakeupSentAt == nil {
			t.Fatal("wakeup_sent_at not set")
		}
	})

	t.Run("list pages and filters", func(t *testing.T) {
		b := newBackend(t)
		var ids []string
		for i := range 5 {
			turn := "turn-a"
			if i%2 == 1 {
				turn = "turn-b"
			}
			e, _, err := b.insert("p1", "c1", rep(turn, fmt.Sprintf("call-%d", i), 0), "")
			must(t, err)
			ids = append(ids, e.InboxID)
		}
		page, err := b.list("p1", ListQuery{AgentID: "agent-a", State: StateAll, Limit: 2})
		must(t, err)
		if len(page) != 2 || page[0].InboxID != ids[0] || page[1].InboxID != ids[1] {
			t.Fatalf("page 1 = %v, want %v", inboxIDs(page), ids[:2])
		}
		page, err = b.list("p1", ListQuery{AgentID: "agent-a", State: StateAll, Limit: 2, After: page[1].InboxID})
		must(t, err)
		if len(page) != 2 || page[0].InboxID != ids[2] || page[1].InboxID != ids[3] {
			t.Fatalf("page 2 = %v, want %v", inboxIDs(page), ids[2:4])
		}
		turnB, err := b.list("p1", ListQuery{AgentID: "agent-a", AgentTurnID: "turn-b", State: StateAll, Limit: MaxList})
		must(t, err)
		if len(turnB) != 2 || turnB[0].InboxID != ids[1] || turnB[1].InboxID != ids[3] {
			t.Fatalf("turn-b = %v", inboxIDs(turnB))
		}
		if _, err := b.list("p1", ListQuery{AgentID: "agent-a", State: StateAll, Limit: 2, After: card.NewID()}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("after an unknown id: err = %v", err)
		}
	})

	t.Run("concurrent duplicates make one entry", func(t *testing.T) {
		b := newBackend(t)
		const n = 8
		var wg sync.WaitGroup
		type res struct {
			id  string
			out outcome
			err error
		}
		got := make(chan res, n)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e, out, err := b.insert("p1", "c1", rep("turn-1", "call-1", 0), "")
				r := res{out: out, err: err}
				if e != nil {
					r.id = e.InboxID
				}
				got <- r
			}()
		}
		wg.Wait()
		close(got)
		news, id := 0, ""
		for r := range got {
			must(t, r.err)
			if id == "" {
				id = r.id
			}
			if r.id != id {
				t.Fatalf("two inbox ids for one call: %s and %s", id, r.id)
			}
			if r.out == outcomeNew {
				news++
			}
		}
		if news != 1 {
			t.Fatalf("%d inserts made a new entry, want 1", news)
		}
	})
}

func inboxIDs(es []Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.InboxID
	}
	return out
}

// TestKVInsertRepairsAHalfInsert: an inbox that stopped after creating a
// call's dedupe key (before the entry) leaves the key naming an entry that
// does not exist; the report's redelivery finishes the insert with that id.
func TestKVInsertRepairsAHalfInsert(t *testing.T) {
	srv := meshtest.NATS(t)
	js, err := jetstream.New(meshtest.Conn(t, srv))
	must(t, err)
	b := kvBackendOn(t, js, 1).(*kvBackend)
	ctx := context.Background()
	r := rep("turn-1", "call-1", 0)
	id := card.NewID()
	_, err = b.kv.Create(ctx, "c.p1."+hashToken("p1", r.AgentTurnID, r.ToolCallID), []byte(id))
	must(t, err)
	e, out, err := b.insert("p1", "c1", r, "")
	must(t, err)
	if e.InboxID != id || out != outcomeNew {
		t.Fatalf("insert after a half insert = %s, %v; want the id the first one chose (%s) and a new entry", e.InboxID, out, id)
	}
	es, err := b.list("p1", ListQuery{AgentID: "agent-a", State: StatePending, Limit: MaxList})
	must(t, err)
	if len(es) != 1 || es[0].InboxID != id {
		t.Fatalf("pending = %v", inboxIDs(es))
	}
}

// TestServicesShareABucket: two inbox services on one key-value bucket
// (cluster mode runs one per node) take reports and answer queries as one
// inbox: a report to either is seen by both, and a duplicate sent to the
// other makes no second entry.
func TestServicesShareABucket(t *testing.T) {
	e := newEnv(t, 2)
	bk, err := OpenBucket(context.Background(), e.js, "", 1)
	must(t, err)
	var svcs []*Service
	for range 2 {
		s, err := New(e.nc, Config{Store: e.store, Bucket: bk, Logger: e.cfg.Logger})
		must(t, err)
		svcs = append(svcs, s)
	}
	ctx := context.Background()
	c := e.putResult("p1", "agent-a", "turn-1", "call-1", 0)
	first, out, err := svcs[0].st.insert("p1", "c1", mustReport(t, c), "")
	must(t, err)
	if out != outcomeNew {
		t.Fatalf("first insert: %v", out)
	}
	again, out, err := svcs[1].st.insert("p1", "c1", mustReport(t, c), "")
	must(t, err)
	if out != outcomeDuplicate || again.InboxID != first.InboxID {
		t.Fatalf("the other service: %v %s, want a duplicate of %s", out, again.InboxID, first.InboxID)
	}
	es, err := svcs[1].List(ctx, "p1", ListQuery{AgentID: "agent-a"})
	must(t, err)
	if len(es) != 1 || es[0].InboxID != first.InboxID {
		t.Fatalf("list through the other service = %v", inboxIDs(es))
	}
	if _, err := svcs[1].AckLazy(ctx, "p1", first.InboxID); err != nil {
		t.Fatal(err)
	}
	got, err := svcs[0].Get(ctx, "p1", first.InboxID)
	must(t, err)
	if got.State != StateAcked {
		t.Fatalf("after a lazy ack through the other service: %s", got.State)
	}
	if svcs[0].DB() != nil {
		t.Fatal("DB() of a bucket-backed inbox is not nil")
	}
	for _, s := range svcs {
		must(t, s.Stop(ctx))
	}
}

func mustReport(t *testing.T, c *call) *utp.Report {
	t.Helper()
	r, err := utp.ParseReport(mustJSON(t, c.report()))
	must(t, err)
	return r
}
