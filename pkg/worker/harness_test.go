package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/builtins"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/registry/boltreg"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
	"github.com/utpmesh/utpmesh/subjects"
)

const (
	ver     = subjects.DefaultVersion
	project = "proj"
	channel = "chan"
	agentID = "agent-1"
)

var seq atomic.Int64

// harness is a real mesh slice: embedded nats-server with JetStream, a bbolt
// CardStore and registry, and a worker runtime.
type harness struct {
	t       testing.TB
	nc      *nats.Conn
	js      jetstream.JetStream
	store   *boltstore.Store
	reg     registry.Registry
	rt      *worker.Runtime
	reports chan *nats.Msg
	dead    chan *nats.Msg
	// early holds reports awaitReport read while waiting for another call:
	// reports of concurrent calls arrive in any order.
	early map[string][]*nats.Msg
}

func newHarness(t *testing.T, cfg worker.Config, tools ...worker.Tool) *harness {
	t.Helper()
	return newHarnessStore(t, cfg, nil, tools...)
}

// newHarnessStore is newHarness with CardStore options (e.g. a small card
// size limit).
func newHarnessStore(t *testing.T, cfg worker.Config, storeOpts []boltstore.Option, tools ...worker.Tool) *harness {
	t.Helper()
	return newHarnessWrapped(t, cfg, storeOpts, nil, tools...)
}

// newHarnessWrapped is newHarnessStore whose worker sees the CardStore
// through wrap (nil: as it is), e.g. to stall or count its requests.
func newHarnessWrapped(t testing.TB, cfg worker.Config, storeOpts []boltstore.Option, wrap func(*boltstore.Store) cardstore.Store, tools ...worker.Tool) *harness {
	t.Helper()
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := streams.Ensure(ctx, js, ver); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := boltstore.Open(dir+"/cards.db", storeOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	reg, err := boltreg.Open(dir + "/registry.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	h := &harness{t: t, nc: nc, js: js, store: st, reg: reg, reports: make(chan *nats.Msg, 256), dead: make(chan *nats.Msg, 64)}
	rp, _ := subjects.InboxReportPattern(ver)
	if _, err := nc.ChanSubscribe(rp, h.reports); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.ChanSubscribe("cg."+ver+".*.*.evt.sys.deadletter.>", h.dead); err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.Registry = st, reg
	if wrap != nil {
		cfg.Store = wrap(st)
	}
	if cfg.Projects == nil {
		cfg.Projects = []string{project}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn + 4}))
	}
	if len(tools) == 0 {
		tools = []worker.Tool{echo.Tool()}
	}
	tools = append(tools, builtins.Tools(builtins.Deps{NC: nc, Store: st, Registry: reg, Holder: "pmo-test"})...)
	rt, err := worker.New(nc, cfg, tools...)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Stop(sctx)
	})
	h.rt = rt
	return h
}

// call is one tool call under test.
type call struct {
	turn, id string
	card     *card.Card
}

func nextIDs() (turn, callID string) {
	n := seq.Add(1)
	return fmt.Sprintf("turn-%d", n), fmt.Sprintf("call-%d", n)
}

// writeCall writes a tool.call card for tool with args.
func (h *harness) writeCall(tool, args string) call {
	h.t.Helper()
	c := newCall(tool, args)
	if err := h.store.Put(context.Background(), c.card); err != nil {
		h.t.Fatal(err)
	}
	return c
}

// newCall returns a call of tool with args whose tool.call card is not
// written yet.
func newCall(tool, args string) call {
	turn, id := nextIDs()
	content, _ := json.Marshal(card.ToolCallContent{ToolName: tool, Arguments: json.RawMessage(args), TargetSubject: "x"})
	c := &card.Card{
		CardID: card.NewID(), ProjectID: project, Type: card.TypeToolCall, AuthorID: agentID,
		Content: content, ToolCallID: id, CreatedAt: time.Now().UTC(),
		Metadata: card.Metadata{AgentID: agentID, AgentTurnID: turn, TurnEpoch: 1, StepID: "step-" + id,
			ToolCallID: id, TraceID: "0af7651916cd43dd8448eb211c80319c", ParentStepID: "parent-" + id},
	}
	return call{turn: turn, id: id, card: c}
}

// command returns a valid command body for c.
func (c call) command(tool string) map[string]any {
	return map[string]any{
		"agent_id": agentID, "agent_turn_id": c.turn, "turn_epoch": 1, "tool_call_id": c.id,
		"after_execution": "suspend", "tool_call_card_id": c.card.CardID, "tool_name": tool, "step_id": "step-" + c.id,
	}
}

func toolSubject(target string) string {
	s, _ := subjects.ToolCommand(ver, project, channel, target)
	return s.String()
}

func pmoSubject(tool string) string {
	s, _ := subjects.PMOInternal(ver, project, channel, tool)
	return s.String()
}

// publish sends a command body (a map or raw bytes) with JetStream.
func (h *harness) publish(subject string, body any, hdr nats.Header) {
	h.t.Helper()
	m := nats.NewMsg(subject)
	switch b := body.(type) {
	case []byte:
		m.Data = b
	default:
		m.Data, _ = json.Marshal(b)
	}
	for k, v := range hdr {
		m.Header[k] = v
	}
	if _, err := h.js.PublishMsg(context.Background(), m); err != nil {
		h.t.Fatal(err)
	}
}

// awaitReport waits for the report of callID.
func (h *harness) awaitReport(callID string) (utp.Report, *nats.Msg) {
	h.t.Helper()
	decode := func(m *nats.Msg) utp.Report {
		var r utp.Report
		if err := json.Unmarshal(m.Data, &r); err != nil {
			h.t.Fatalf("report is not JSON: %s", m.Data)
		}
		return r
	}
	if q := h.early[callID]; len(q) > 0 {
		h.early[callID] = q[1:]
		return decode(q[0]), q[0]
	}
	deadline := time.After(20 * time.Second)
	for {
		select {
		case m := <-h.reports:
			r := decode(m)
			if r.ToolCallID == callID {
				return r, m
			}
			if h.early == nil {
				h.early = map[string][]*nats.Msg{}
			}
			h.early[r.ToolCallID] = append(h.early[r.ToolCallID], m)
		case <-deadline:
			h.t.Fatalf("no report for %s", callID)
		}
	}
}

// result reads the tool.result card the report points at.
func (h *harness) result(r utp.Report) (*card.Card, *card.ToolResultContent) {
	h.t.Helper()
	c, err := h.store.Get(context.Background(), project, r.ToolResultCardID)
	if err != nil {
		h.t.Fatalf("result card %s: %v", r.ToolResultCardID, err)
	}
	tr, err := c.ToolResult()
	if err != nil {
		h.t.Fatal(err)
	}
	return c, tr
}

func (h *harness) awaitDeadLetter() worker.DeadLetter {
	h.t.Helper()
	select {
	case m := <-h.dead:
		var d worker.DeadLetter
		if err := json.Unmarshal(m.Data, &d); err != nil {
			h.t.Fatal(err)
		}
		return d
	case <-time.After(20 * time.Second):
		h.t.Fatal("no dead letter")
	}
	return worker.DeadLetter{}
}
