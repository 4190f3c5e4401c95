package inboxsvc

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
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

// commitCount counts the node file's commits.
type commitCount struct{ n atomic.Int64 }

func (c *commitCount) Committed(int, time.Duration) { c.n.Add(1) }

// newNodeEnv is newEnv with a node's file: the CardStore and the inbox in
// one bbolt file with one committer, the inbox's result hook attached.
func newNodeEnv(t *testing.T) (*env, *commitCount) {
	t.Helper()
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	js, err := jetstream.New(nc)
	must(t, err)
	ctx := context.Background()
	must(t, streams.Ensure(ctx, js, ver))
	path := filepath.Join(t.TempDir(), "cards.db")
	db, err := boltfile.Open(path, boltfile.Options{})
	must(t, err)
	obs := &commitCount{}
	commits := boltfile.NewCommitter(db, boltfile.CommitConfig{Observer: obs})
	ib, err := boltinbox.OpenShared(db, commits)
	must(t, err)
	hook, err := ib.ResultHook(ver, nil)
	must(t, err)
	store, err := boltstore.OpenShared(db, commits, boltstore.WithResultHook(hook))
	must(t, err)
	client, err := natsinbox.NewClient(nc, svc.WithChannel("c1"))
	must(t, err)
	e := &env{t: t, nc: nc, js: js, store: store, path: path, client: client, db: ib}
	e.cfg = Config{
		Store: store, Backend: ib, Concurrency: 4, AckWait: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	e.svc, err = New(nc, e.cfg)
	must(t, err)
	must(t, e.svc.Start(ctx))
	hook.Attach(e.svc)
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.svc.Stop(stopCtx); err != nil {
			t.Errorf("stop: %v", err)
		}
		must(t, ib.Close())
		must(t, store.Close())
		commits.Close()
		must(t, db.Close())
		must(t, boltinbox.Check(path))
	})
	return e, obs
}

// putCall stores the tool.call card of a call on channel c1, as admission
// writes it.
func (e *env) putCall(project, agent, turn, callID string) {
	e.t.Helper()
	content, _ := json.Marshal(card.ToolCallContent{ToolName: "web_search", Arguments: json.RawMessage(`{}`),
		TargetSubject: "cg." + ver + "." + project + ".c1.cmd.tool.web_search"})
	must(e.t, e.store.Put(context.Background(), &card.Card{
		CardID: card.NewID(), ProjectID: project, Type: card.TypeToolCall, AuthorID: "agent-x",
		Content: content, ToolCallID: callID, CreatedAt: time.Now(),
		Metadata: card.Metadata{AgentID: agent, AgentTurnID: turn, ToolCallID: callID, StepID: "step-1"},
	}))
}

// awaitMark waits until the entry reads with its wakeup-sent mark.
func (e *env) awaitMark(project, id string) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := e.svc.Get(context.Background(), project, id)
		must(e.t, err)
		if got.WakeupSentAt != nil {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("entry %s never got its wakeup-sent mark", id)
		}
		must(e.t, e.db.Flush(context.Background()))
		time.Sleep(5 * time.Millisecond)
	}
}

// TestResultStoresEntry: on a node file, the worker's result put stores
// the call's entry in the same commit, and the wakeup arrives before the
// worker reports; the report then answers with that entry, without a
// second entry, wakeup or commit.
func TestResultStoresEntry(t *testing.T) {
	e, commits := newNodeEnv(t)
	wakes := e.wakeups("p1", "agent-a")
	e.putCall("p1", "agent-a", "turn-1", "call-1")

	before := commits.n.Load()
	c := e.putResult("p1", "agent-a", "turn-1", "call-1", 0)
	if n := commits.n.Load() - before; n != 1 {
		t.Fatalf("the result's put took %d commits, want 1 (card, claim and entry together)", n)
	}
	// The entry is durable when Put returns.
	es := e.list("p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StatePending})
	if len(es) != 1 || es[0].ToolResultCardID != c.card.CardID || es[0].ChannelID != "c1" || es[0].StepID != "step-1" {
		t.Fatalf("entries after the put = %+v, want the result's, on channel c1", es)
	}
	entry := es[0]
	// The wakeup comes without any report.
	w := decodeWakeup(t, next(t, wakes))
	if w.InboxID != entry.InboxID || w.ToolResultCardID != c.card.CardID || w.Status != card.StatusSuccess {
		t.Fatalf("wakeup = %+v, want entry %s", w, entry.InboxID)
	}
	// It carries the result card as stored.
	stored, err := e.store.GetJSON(context.Background(), "p1", c.card.CardID, nil)
	must(t, err)
	if string(w.ResultCard) != string(stored) {
		t.Fatalf("wakeup's result_card = %s, want the stored card %s", w.ResultCard, stored)
	}
	e.awaitMark("p1", entry.InboxID)

	// The worker's report: the same entry, no commit, no second wakeup.
	before = commits.n.Load()
	rep, err := e.request("p1", c.report(), "")
	must(t, err)
	if rep.InboxID != entry.InboxID || rep.State != inbox.StatePending {
		t.Fatalf("report reply = %+v, want entry %s pending", rep, entry.InboxID)
	}
	if n := commits.n.Load() - before; n != 0 {
		t.Fatalf("the report of a stored entry took %d commits, want 0", n)
	}
	must(t, e.nc.Flush())
	if n := pendingCount(t, wakes); n != 0 {
		t.Fatalf("%d more wakeups after the report, want 0", n)
	}
	st, err := e.js.Stream(context.Background(), streams.WakeupStream(ver))
	must(t, err)
	if n := st.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("wakeup stream holds %d messages, want 1", n)
	}
	if es := e.list("p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StateAll}); len(es) != 1 {
		t.Fatalf("entries after the report = %+v, want one", es)
	}
}

// TestWakeupCardLimit: a wakeup carries only a result card of at most
// WakeupCardMax bytes; a larger one is pointed at only.
func TestWakeupCardLimit(t *testing.T) {
	e, _ := newNodeEnv(t)
	wakes := e.wakeups("p1", "agent-a")
	e.putCall("p1", "agent-a", "turn-1", "call-big")
	content, _ := json.Marshal(card.ToolResultContent{Status: card.StatusSuccess, AfterExecution: card.Suspend,
		Result: json.RawMessage(`{"blob":"` + strings.Repeat("x", WakeupCardMax) + `"}`)})
	c := &card.Card{CardID: card.NewID(), ProjectID: "p1", Type: card.TypeToolResult, AuthorID: "tool-x",
		Content: content, ToolCallID: "call-big", CreatedAt: time.Now(),
		Metadata: card.Metadata{AgentID: "agent-a", AgentTurnID: "turn-1", ToolCallID: "call-big", StepID: "step-1"}}
	must(t, e.store.Put(context.Background(), c))
	w := decodeWakeup(t, next(t, wakes))
	if w.ToolResultCardID != c.CardID || len(w.ResultCard) != 0 {
		t.Fatalf("wakeup of a %d-byte card: card %s, carried %d bytes; want it pointed at only", len(content), w.ToolResultCardID, len(w.ResultCard))
	}
}

// TestResultReportedAtOnce: the worker's report right after its put (the
// wakeup possibly still being published) answers once the wakeup is
// stored, with the put's entry; one wakeup in all.
func TestResultReportedAtOnce(t *testing.T) {
	e, _ := newNodeEnv(t)
	wakes := e.wakeups("p1", "agent-a")
	for i, id := range []string{"call-1", "call-2", "call-3"} {
		e.putCall("p1", "agent-a", "turn-1", id)
		c := e.putResult("p1", "agent-a", "turn-1", id, 0)
		rep, err := e.request("p1", c.report(), "")
		must(t, err)
		w := decodeWakeup(t, next(t, wakes))
		if w.InboxID != rep.InboxID || w.ToolCallID != id {
			t.Fatalf("call %d: wakeup %+v, report reply %+v: want one entry", i, w, rep)
		}
	}
	must(t, e.nc.Flush())
	if n := pendingCount(t, wakes); n != 0 {
		t.Fatalf("%d wakeups more than one per call", n)
	}
	if es := e.list("p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StateAll}); len(es) != 3 {
		t.Fatalf("entries = %d, want 3", len(es))
	}
}

// TestResultWithoutEntry: a result the hook makes no entry for (no
// tool.call card to name its channel; an agent_id the inbox refuses)
// is stored all the same; the worker's report then takes the ordinary
// way: accepted with its wakeup, or refused and dead-lettered.
func TestResultWithoutEntry(t *testing.T) {
	e, _ := newNodeEnv(t)
	wakes := e.wakeups("p1", "agent-a")
	dls := e.deadLetters()

	c := e.putResult("p1", "agent-a", "turn-1", "no-call-card", 0)
	if es := e.list("p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StateAll}); len(es) != 0 {
		t.Fatalf("entries of a result without a call card = %+v, want none", es)
	}
	rep, err := e.request("p1", c.report(), "")
	must(t, err)
	if w := decodeWakeup(t, next(t, wakes)); w.InboxID != rep.InboxID {
		t.Fatalf("wakeup %+v, want the report's entry %s", w, rep.InboxID)
	}

	// A result without metadata.agent_id gets no entry from the put;
	// the worker's report of it (without agent_id) is refused and
	// dead-lettered, as before the node file.
	e.putCall("p1", "", "turn-2", "call-2")
	c2 := e.putResult("p1", "", "turn-2", "call-2", 0)
	if es := e.list("p1", inbox.ListQuery{AgentID: "agent-a", AgentTurnID: "turn-2", State: inbox.StateAll}); len(es) != 0 {
		t.Fatalf("entries of a result without agent_id = %+v, want none", es)
	}
	if _, err := e.request("p1", c2.report(), ""); !errors.Is(err, inbox.ErrRefused) {
		t.Fatalf("a report without agent_id: %v, want ErrRefused", err)
	}
	if dl := next(t, dls); dl == nil {
		t.Fatal("no dead letter")
	}
}

// TestResultWakeupFailsThenReport: the wakeup publish the result's commit
// starts fails (no wakeup stream); the entry is durable all the same, and
// the worker's report publishes the wakeup itself before it answers.
func TestResultWakeupFailsThenReport(t *testing.T) {
	e, _ := newNodeEnv(t)
	ctx := context.Background()
	// No subscriber on the wakeup subject yet: a publish nothing stores
	// then fails at once (no responders) instead of waiting for a PubAck.
	must(t, e.js.DeleteStream(ctx, streams.WakeupStream(ver)))
	e.putCall("p1", "agent-a", "turn-1", "call-1")
	c := e.putResult("p1", "agent-a", "turn-1", "call-1", 0)
	es := e.list("p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StateAll})
	if len(es) != 1 {
		t.Fatalf("entries after the put = %+v, want one", es)
	}
	// The report fails while the stream is missing (the worker would fall
	// back to the command stream); no wakeup was stored.
	if _, err := e.request("p1", c.report(), ""); err == nil {
		t.Fatal("the report was answered without a wakeup stream")
	}
	must(t, streams.Ensure(ctx, e.js, ver))
	wakes := e.wakeups("p1", "agent-a")
	rep, err := e.request("p1", c.report(), "")
	must(t, err)
	if rep.InboxID != es[0].InboxID {
		t.Fatalf("reply %+v, want entry %s", rep, es[0].InboxID)
	}
	st, err := e.js.Stream(ctx, streams.WakeupStream(ver))
	must(t, err)
	if n := st.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("wakeup stream holds %d messages, want 1", n)
	}
	if w := decodeWakeup(t, next(t, wakes)); w.InboxID != rep.InboxID {
		t.Fatalf("wakeup %+v, want entry %s", w, rep.InboxID)
	}
}
