package inboxsvc

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/boltinbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/natsinbox"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// lostAnnouncer is the Announcer of a process killed right after a
// result's commit: the entry is durable, its wakeup never published.
type lostAnnouncer struct{}

func (lostAnnouncer) Announce(*inbox.Entry, bool, *card.Card, []byte) {}

var _ boltinbox.Announcer = lostAnnouncer{}

// newCrashedNode is a node's file (CardStore and inbox, the result hook
// on) whose hook announces to nobody and on which no inbox service runs
// yet: results store their entries, and no wakeup is published, as in a
// process killed after each result's commit. restart starts the service.
func newCrashedNode(t *testing.T) *env {
	t.Helper()
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	js, err := jetstream.New(nc)
	must(t, err)
	must(t, streams.Ensure(context.Background(), js, ver))
	path := filepath.Join(t.TempDir(), "cards.db")
	db, err := boltfile.Open(path, boltfile.Options{})
	must(t, err)
	commits := boltfile.NewCommitter(db, boltfile.CommitConfig{})
	ib, err := boltinbox.OpenShared(db, commits)
	must(t, err)
	hook, err := ib.ResultHook(ver, nil)
	must(t, err)
	hook.Attach(lostAnnouncer{})
	store, err := boltstore.OpenShared(db, commits, boltstore.WithResultHook(hook))
	must(t, err)
	client, err := natsinbox.NewClient(nc, svc.WithChannel("c1"))
	must(t, err)
	e := &env{t: t, nc: nc, js: js, store: store, path: path, client: client, db: ib}
	e.cfg = Config{
		Store: store, Backend: ib, Concurrency: 4, AckWait: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	t.Cleanup(func() {
		e.stopService()
		must(t, ib.Close())
		must(t, store.Close())
		commits.Close()
		must(t, db.Close())
		must(t, boltinbox.Check(path))
	})
	return e
}

// restart stops the running inbox service, if any, starts a new one on
// the same file and waits until its start's ringing has ended.
func (e *env) restart() {
	e.t.Helper()
	e.stopService()
	s, err := New(e.nc, e.cfg)
	must(e.t, err)
	must(e.t, s.Start(context.Background()))
	e.svc = s
	select {
	case <-s.rung:
	case <-time.After(30 * time.Second):
		e.t.Fatal("the start's ringing of unmarked entries did not end")
	}
}

func (e *env) stopService() {
	e.t.Helper()
	if e.svc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.svc.Stop(ctx); err != nil {
		e.t.Errorf("stop: %v", err)
	}
	e.svc = nil
}

// storedWakeups is how many wakeups the wakeup stream holds.
func (e *env) storedWakeups() uint64 {
	e.t.Helper()
	st, err := e.js.Stream(context.Background(), streams.WakeupStream(ver))
	must(e.t, err)
	info, err := st.Info(context.Background())
	must(e.t, err)
	return info.State.Msgs
}

// TestStartRingsUnmarkedEntries: entries stored with their results whose
// wakeups a crash lost (the worker sent no report) are rung when the inbox
// starts: one stored wakeup each, the agent woken, the mark written; an
// acked entry is not rung; a second start rings nothing more.
func TestStartRingsUnmarkedEntries(t *testing.T) {
	e := newCrashedNode(t)
	ctx := context.Background()
	wakes := e.wakeups("p1", "agent-a")
	for _, id := range []string{"call-1", "call-2", "call-3"} {
		e.putCall("p1", "agent-a", "turn-1", id)
		e.putResult("p1", "agent-a", "turn-1", id, 0)
	}
	es, err := e.db.List(ctx, "p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StatePending, Limit: 10})
	must(t, err)
	if len(es) != 3 {
		t.Fatalf("entries stored with the results = %+v, want 3", es)
	}
	// The agent read call-3's result another way (its pending list) and
	// acked it: no wakeup for it.
	if _, err := e.db.Ack(ctx, "p1", []string{es[2].InboxID}, time.Now()); err != nil {
		t.Fatal(err)
	}
	must(t, e.nc.Flush())
	if n := e.storedWakeups(); n != 0 || pendingCount(t, wakes) != 0 {
		t.Fatalf("%d wakeups stored before the restart, want none", n)
	}

	e.restart()
	woken := map[string]bool{}
	for range 2 {
		w := decodeWakeup(t, next(t, wakes))
		woken[w.InboxID] = true
	}
	for _, en := range es[:2] {
		if !woken[en.InboxID] {
			t.Fatalf("entry %s (%s) not woken; woken %v", en.InboxID, en.ToolCallID, woken)
		}
		e.awaitMark("p1", en.InboxID)
	}
	must(t, e.nc.Flush())
	if n := pendingCount(t, wakes); n != 0 {
		t.Fatalf("%d more wakeups (the acked entry's?), want none", n)
	}
	if n := e.storedWakeups(); n != 2 {
		t.Fatalf("wakeup stream holds %d, want 2 (one per unacked entry)", n)
	}

	// Marked now: the next start rings nothing.
	e.restart()
	must(t, e.nc.Flush())
	if n := pendingCount(t, wakes); n != 0 {
		t.Fatalf("a second start rang %d wakeups, want none", n)
	}
	if n := e.storedWakeups(); n != 2 {
		t.Fatalf("wakeup stream holds %d after a second start, want 2", n)
	}
}

// TestStartRingStoresOnce: an entry whose wakeup was stored before the
// crash but whose wakeup-sent mark was not (the mark rides along with a
// later commit) is rung again at the start under the same Nats-Msg-Id:
// within the stream's duplicate window nothing new is stored, and the
// entry gets its mark. (The agent's core subscription may see the
// doorbell twice; its ack of the entry makes the second a no-op.)
func TestStartRingStoresOnce(t *testing.T) {
	e := newCrashedNode(t)
	ctx := context.Background()
	e.putCall("p1", "agent-a", "turn-1", "call-1")
	e.putResult("p1", "agent-a", "turn-1", "call-1", 0)
	es, err := e.db.List(ctx, "p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StatePending, Limit: 10})
	must(t, err)
	if len(es) != 1 {
		t.Fatalf("entries = %+v, want one", es)
	}
	// The killed process had published the wakeup, not its mark.
	pre, err := New(e.nc, e.cfg)
	must(t, err)
	must(t, pre.publishWakeup(ctx, nil, &es[0], nil))
	if n := e.storedWakeups(); n != 1 {
		t.Fatalf("wakeup stream holds %d, want 1", n)
	}

	wakes := e.wakeups("p1", "agent-a")
	e.restart()
	if w := decodeWakeup(t, next(t, wakes)); w.InboxID != es[0].InboxID {
		t.Fatalf("wakeup %+v, want entry %s", w, es[0].InboxID)
	}
	e.awaitMark("p1", es[0].InboxID)
	if n := e.storedWakeups(); n != 1 {
		t.Fatalf("wakeup stream holds %d after the start's ring, want 1 (the same Nats-Msg-Id)", n)
	}
}

// TestAnnounceRetries: a wakeup whose publish fails (no wakeup stream)
// is published again once it can be stored, without any report: the
// worker was told its result's entry is stored and sent none.
func TestAnnounceRetries(t *testing.T) {
	e, _ := newNodeEnv(t)
	ctx := context.Background()
	must(t, e.js.DeleteStream(ctx, streams.WakeupStream(ver)))
	e.putCall("p1", "agent-a", "turn-1", "call-1")
	e.putResult("p1", "agent-a", "turn-1", "call-1", 0)
	es := e.list("p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StateAll})
	if len(es) != 1 {
		t.Fatalf("entries after the put = %+v, want one", es)
	}
	// The first publish fails (its flight is dropped); only then does the
	// stream come back, for the retry.
	deadline := time.Now().Add(20 * time.Second)
	for {
		e.svc.fmu.Lock()
		n := len(e.svc.flights)
		e.svc.fmu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the wakeup's first publish neither failed nor succeeded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	must(t, streams.Ensure(ctx, e.js, ver))
	e.awaitMark("p1", es[0].InboxID)
	if n := e.storedWakeups(); n != 1 {
		t.Fatalf("wakeup stream holds %d, want 1", n)
	}
}
