package inboxsvc

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/boltinbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/natsinbox"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

const ver = subjects.DefaultVersion

// env is a running mesh: a real nats-server with the streams, a real
// bbolt CardStore and an inbox Service.
type env struct {
	t      *testing.T
	nc     *nats.Conn
	js     jetstream.JetStream
	store  *boltstore.Store
	path   string
	db     *boltinbox.DB // the backend, opened by start, closed by stop
	cfg    Config
	svc    *Service
	client *natsinbox.Client
}

func newEnv(t *testing.T, concurrency int) *env {
	t.Helper()
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	js, err := jetstream.New(nc)
	must(t, err)
	ctx := context.Background()
	must(t, streams.Ensure(ctx, js, ver))
	store, err := boltstore.Open(filepath.Join(t.TempDir(), "cards.db"))
	must(t, err)
	t.Cleanup(func() { _ = store.Close() })
	client, err := natsinbox.NewClient(nc, svc.WithChannel("c1"))
	must(t, err)
	e := &env{t: t, nc: nc, js: js, store: store, path: filepath.Join(t.TempDir(), "inbox.db"), client: client}
	e.cfg = Config{
		Store: store, Concurrency: concurrency, AckWait: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	e.start()
	// Runs before the NATS server shuts down (cleanups run last-in first-out).
	t.Cleanup(func() {
		e.stop()
		must(t, boltinbox.Check(e.path))
	})
	return e
}

// start opens the inbox file and starts a Service on it.
func (e *env) start() {
	e.t.Helper()
	db, err := boltinbox.Open(e.path, boltinbox.DefaultOpenTimeout)
	must(e.t, err)
	e.db, e.cfg.Backend = db, db
	s, err := New(e.nc, e.cfg)
	must(e.t, err)
	must(e.t, s.Start(context.Background()))
	e.svc = s
}

func (e *env) stop() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.svc.Stop(ctx); err != nil {
		e.t.Errorf("stop: %v", err)
	}
	if err := e.db.Close(); err != nil {
		e.t.Errorf("close the inbox file: %v", err)
	}
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// call is one tool call whose result card is in the store.
type call struct {
	project, agent, turn, callID string
	epoch                        int64
	card                         *card.Card
}

func (e *env) putResult(project, agent, turn, callID string, epoch int64) *call {
	e.t.Helper()
	content, _ := json.Marshal(card.ToolResultContent{Status: card.StatusSuccess, AfterExecution: card.Suspend, Result: json.RawMessage(`{"ok":true}`)})
	c := &card.Card{
		CardID: card.NewID(), ProjectID: project, Type: card.TypeToolResult, AuthorID: "tool-x",
		Content: content, ToolCallID: callID, CreatedAt: time.Now(),
		Metadata: card.Metadata{AgentID: agent, AgentTurnID: turn, TurnEpoch: epoch, ToolCallID: callID, StepID: "step-1"},
	}
	must(e.t, e.store.Put(context.Background(), c))
	return &call{project: project, agent: agent, turn: turn, callID: callID, epoch: epoch, card: c}
}

func (c *call) report() map[string]any {
	return map[string]any{
		"tool_call_id": c.callID, "agent_turn_id": c.turn, "turn_epoch": c.epoch, "agent_id": c.agent,
		"tool_result_card_id": c.card.CardID, "status": "success", "after_execution": "suspend",
		"step_id": "step-1", "tool_name": "web_search", "unknown_extension": 1,
	}
}

// publish sends a report body (a map is JSON-encoded, []byte is sent as is)
// with JetStream on the project's report subject.
func (e *env) publish(project string, body any, traceparent string) {
	e.t.Helper()
	subj, err := subjects.InboxReport(ver, project, "c1")
	must(e.t, err)
	_, err = e.js.PublishMsg(context.Background(), e.reportMsg(subj.String(), body, traceparent))
	must(e.t, err)
}

// reportMsg is a report body (a map is JSON-encoded, []byte is sent as
// is) on subject, with the traceparent when not empty.
func (e *env) reportMsg(subject string, body any, traceparent string) *nats.Msg {
	e.t.Helper()
	data, ok := body.([]byte)
	if !ok {
		var err error
		data, err = json.Marshal(body)
		must(e.t, err)
	}
	m := nats.NewMsg(subject)
	m.Data = data
	if traceparent != "" {
		m.Header.Set(utp.HeaderTraceparent, traceparent)
	}
	return m
}

// reported stores the result of call k of turn t for agent a in project,
// reports it through the stream and waits for its wakeup and for the
// inbox to settle: the wakeup subscription, the call and its wakeup.
func (e *env) reported(project string) (*nats.Subscription, *call, utp.Wakeup) {
	e.t.Helper()
	wk := e.wakeups(project, "a")
	c := e.putResult(project, "a", "t", "k", 0)
	e.publish(project, c.report(), "")
	w := decodeWakeup(e.t, next(e.t, wk))
	e.settle()
	return wk, c, w
}

// subscribe opens a core subscription, flushed so it is live on the server.
func (e *env) subscribe(pattern string) *nats.Subscription {
	e.t.Helper()
	sub, err := e.nc.SubscribeSync(pattern)
	must(e.t, err)
	must(e.t, e.nc.Flush())
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return sub
}

func (e *env) wakeups(project, agent string) *nats.Subscription {
	p, err := subjects.WakeupPattern(ver, project, "*", agent)
	must(e.t, err)
	return e.subscribe(p)
}

func (e *env) deadLetters() *nats.Subscription {
	return e.subscribe("cg." + ver + ".*.*.evt.sys.deadletter.command")
}

func next(t *testing.T, sub *nats.Subscription) *nats.Msg {
	t.Helper()
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("waiting on %s: %v", sub.Subject, err)
	}
	return m
}

func decodeWakeup(t *testing.T, m *nats.Msg) utp.Wakeup {
	t.Helper()
	var w utp.Wakeup
	must(t, json.Unmarshal(m.Data, &w))
	return w
}

// settle waits until the inbox consumer has every report handled and
// acknowledged (or terminated), then flushes the connection so every
// message the inbox published before is in our subscriptions.
func (e *env) settle() {
	e.t.Helper()
	cons, err := e.js.Consumer(context.Background(), streams.CommandStream(ver), streams.InboxConsumer)
	must(e.t, err)
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := cons.Info(context.Background())
		must(e.t, err)
		if info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("inbox consumer not settled: %d pending, %d awaiting ack", info.NumPending, info.NumAckPending)
		}
		time.Sleep(10 * time.Millisecond)
	}
	must(e.t, e.nc.Flush())
	// Wakeup-sent marks ride along with the next write: one empty write
	// commits those queued so far (their callbacks run before it returns).
	must(e.t, e.db.Flush(context.Background()))
}

// pendingCount returns how many messages a subscription holds now.
func pendingCount(t *testing.T, sub *nats.Subscription) int {
	t.Helper()
	n, _, err := sub.Pending()
	must(t, err)
	return n
}

func (e *env) list(project string, q inbox.ListQuery) []inbox.Entry {
	e.t.Helper()
	es, err := e.client.List(context.Background(), project, q)
	must(e.t, err)
	return es
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
