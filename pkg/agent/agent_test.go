package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

const (
	project = "demo"
	channel = "c1"
	// wait bounds every wait of the tests; it is a failure deadline, never
	// an assertion on how long something took.
	wait = 30 * time.Second
)

var quiet = slog.New(slog.DiscardHandler)

type env struct {
	m  *mesh.Mesh
	nc *nats.Conn
}

func startMesh(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Tools: []worker.Tool{echo.Tool()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A short drain: calls still running are canceled (and report).
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = m.Stop(sctx)
	})
	nc, err := nats.Connect(m.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &env{m: m, nc: nc}
}

func (e *env) client(t *testing.T, agentID string) *agent.Client {
	t.Helper()
	c, err := agent.New(e.nc, agent.Config{Project: project, Channel: channel, AgentID: agentID, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func jsonEqual(t *testing.T, got, want json.RawMessage) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got %s: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("want %s: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestNewValidates(t *testing.T) {
	nc := &nats.Conn{} // never used: validation fails first
	for _, tc := range []struct {
		cfg   agent.Config
		field string
	}{
		{agent.Config{Channel: "c", AgentID: "a"}, "Config.Project"},
		{agent.Config{Project: "p", Channel: "c"}, "Config.AgentID"},
		{agent.Config{Project: "p", Channel: "c", AgentID: "a.b"}, "Config.AgentID"},
		{agent.Config{Project: "p*", Channel: "c", AgentID: "a"}, "Config.Project"},
		{agent.Config{Project: "p", Channel: "c d", AgentID: "a"}, "Config.Channel"},
	} {
		_, err := agent.New(nc, tc.cfg)
		if !errors.Is(err, agent.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v, want ErrInvalid naming %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := agent.New(nil, agent.Config{Project: "p", AgentID: "a"}); !errors.Is(err, agent.ErrInvalid) {
		t.Errorf("New(nil) = %v", err)
	}
}

func TestCallEcho(t *testing.T) {
	e := startMesh(t)
	c := e.client(t, "agent-1")
	ctx := ctxT(t)
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	args := json.RawMessage(`{"msg":"hello","n":[1,2,3]}`)
	out, err := c.Call(agent.ContextWithTraceparent(ctx, tp), agent.CallRequest{
		ToolName: echo.Name, Arguments: args, AgentTurnID: "turn-1", TurnEpoch: 2,
		StepID: "step-1", ParentStepID: "step-0", ToolCallID: "call-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.Result.Status != card.StatusSuccess {
		t.Fatalf("status %s: %+v", out.Result.Status, out.Result.Error)
	}
	jsonEqual(t, out.Result.Result, args)
	if out.AfterExecution != card.Suspend || out.Wakeup.AfterExecution != card.Suspend {
		t.Errorf("after_execution = %s (wakeup %s), want suspend (echo's registered value)", out.AfterExecution, out.Wakeup.AfterExecution)
	}
	if out.Wakeup.ToolCallID != "call-1" || out.Wakeup.AgentTurnID != "turn-1" || out.Wakeup.TurnEpoch != 2 || out.Wakeup.InboxID == "" {
		t.Errorf("wakeup = %+v", out.Wakeup)
	}
	if out.ResultCard.CardID != out.Wakeup.ToolResultCardID || out.ResultCard.ToolCallID != "call-1" {
		t.Errorf("result card %s for %s, wakeup points at %s", out.ResultCard.CardID, out.ResultCard.ToolCallID, out.Wakeup.ToolResultCardID)
	}
	if out.ResultCard.Metadata.TraceID != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("result card trace_id = %q: the traceparent did not travel", out.ResultCard.Metadata.TraceID)
	}

	// The tool.call card.
	cc, err := c.Store().Get(ctx, project, out.Call.ToolCallCardID)
	if err != nil {
		t.Fatal(err)
	}
	want := card.Metadata{AgentID: "agent-1", AgentTurnID: "turn-1", TurnEpoch: 2, StepID: "step-1",
		ToolCallID: "call-1", TraceID: "0af7651916cd43dd8448eb211c80319c", ParentStepID: "step-0", Role: "assistant"}
	// The mesh's admission records its decision and the command's
	// traceparent; no mandate is stored.
	if _, ok := cc.Metadata.Extra["admission"]; !ok || len(cc.Metadata.Extra) != 2 ||
		string(cc.Metadata.Extra[card.ExtraTraceparent]) != `"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"` {
		t.Errorf("tool.call metadata extra = %s, want the admission's decision and the command's traceparent only", cc.Metadata.Extra)
	}
	cc.Metadata.Extra = nil
	if !reflect.DeepEqual(cc.Metadata, want) {
		t.Errorf("tool.call metadata = %+v, want %+v", cc.Metadata, want)
	}
	if cc.AuthorID != "agent-1" || cc.Type != card.TypeToolCall || cc.ToolCallID != "call-1" {
		t.Errorf("tool.call card = %+v", cc)
	}
	tc, err := cc.ToolCall()
	if err != nil {
		t.Fatal(err)
	}
	if tc.ToolName != echo.Name || tc.TargetSubject != "cg.v1r3.demo.c1.cmd.tool.echo" {
		t.Errorf("tool.call content = %+v", tc)
	}
	jsonEqual(t, tc.Arguments, args)

	// The inbox entry is acknowledged (once the lazy ack Call sent without
	// waiting is answered).
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	es, err := c.Inbox().List(ctx, project, inbox.ListQuery{AgentID: "agent-1", AgentTurnID: "turn-1", State: inbox.StateAll})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].State != inbox.StateAcked || es[0].InboxID != out.Wakeup.InboxID {
		t.Errorf("inbox entries = %+v, want one acked", es)
	}
}

func TestCallAfterExecution(t *testing.T) {
	e := startMesh(t)
	c := e.client(t, "agent-ae")
	ctx := ctxT(t)

	// Override in the request: the command carries terminate.
	out, err := c.Call(ctx, agent.CallRequest{ToolName: echo.Name, AgentTurnID: "t", AfterExecution: card.Terminate})
	if err != nil {
		t.Fatal(err)
	}
	if out.AfterExecution != card.Terminate || out.Wakeup.AfterExecution != card.Terminate || out.Call.AfterExecution != card.Terminate {
		t.Errorf("after_execution = %s (wakeup %s, command %s), want terminate", out.AfterExecution, out.Wakeup.AfterExecution, out.Call.AfterExecution)
	}
	jsonEqual(t, out.Result.Result, json.RawMessage(`{}`)) // nil arguments are {}

	// Override in the result (__cg_control): echo returns its arguments.
	out, err = c.Call(ctx, agent.CallRequest{ToolName: echo.Name, AgentTurnID: "t",
		Arguments: json.RawMessage(`{"__cg_control":{"after_execution":"terminate"}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if out.Call.AfterExecution != card.Suspend || out.AfterExecution != card.Terminate {
		t.Errorf("command %s, effective %s; want suspend then terminate", out.Call.AfterExecution, out.AfterExecution)
	}
}

func TestCallInvalid(t *testing.T) {
	e := startMesh(t)
	c := e.client(t, "agent-x")
	ctx := ctxT(t)

	_, err := c.Call(ctx, agent.CallRequest{ToolName: "no_such_tool", AgentTurnID: "t"})
	if !errors.Is(err, agent.ErrUnknownTool) || !strings.Contains(err.Error(), "no_such_tool") || !strings.Contains(err.Error(), project) {
		t.Errorf("unknown tool: %v", err)
	}
	for _, req := range []agent.CallRequest{
		{ToolName: echo.Name},
		{ToolName: echo.Name, AgentTurnID: "t", Arguments: json.RawMessage(`[1]`)},
		{ToolName: echo.Name, AgentTurnID: "t", AfterExecution: "pause"},
		{ToolName: echo.Name, AgentTurnID: "t", TurnEpoch: -1},
		{ToolName: echo.Name, AgentTurnID: "t", Traceparent: "nope"},
		{ToolName: echo.Name, AgentTurnID: "t\nx"},
	} {
		if _, err := c.Call(ctx, req); !errors.Is(err, agent.ErrInvalid) {
			t.Errorf("Call(%+v) = %v, want ErrInvalid", req, err)
		}
	}
}

func TestCallDeadline(t *testing.T) {
	e := startMesh(t)
	c := e.client(t, "agent-slow")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Call(ctx, agent.CallRequest{ToolName: echo.Name, AgentTurnID: "turn-slow", ToolCallID: "call-slow",
		Arguments: json.RawMessage(`{"sleep_ms":1500}`)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call = %v, want a deadline error", err)
	}
	var pe *agent.PendingError
	if !errors.As(err, &pe) || pe.Pending.ToolCallID != "call-slow" || !strings.Contains(err.Error(), "call-slow") {
		t.Fatalf("Call = %v, want a *PendingError naming call-slow", err)
	}

	// The call goes on; its result lands in the inbox, unconsumed.
	rctx := ctxT(t)
	var cs agent.CallState
	for {
		st, err := c.Resume(rctx, "turn-slow")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Unconsumed) == 1 && st.Unconsumed[0].Entry != nil {
			cs = st.Unconsumed[0]
			break
		}
		if len(st.Calls) != 1 {
			t.Fatalf("turn has %d calls, want 1: %+v", len(st.Calls), st)
		}
		select {
		case <-rctx.Done():
			t.Fatalf("the result never reached the inbox: %+v", st)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if cs.ToolCallID != "call-slow" || cs.Result == nil || cs.Result.Status != card.StatusSuccess || cs.Entry.State != inbox.StatePending {
		t.Fatalf("unconsumed = %+v", cs)
	}
	jsonEqual(t, cs.Result.Result, json.RawMessage(`{"sleep_ms":1500}`))
	if n, err := c.Ack(rctx, cs.Entry.InboxID); err != nil || n != 1 {
		t.Fatalf("Ack = %d, %v", n, err)
	}
	st, err := c.Resume(rctx, "turn-slow")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Finished) != 1 || len(st.Unconsumed) != 0 || len(st.Outstanding) != 0 || st.Finished[0].Phase != agent.PhaseFinished {
		t.Fatalf("after ack: %+v", st)
	}
}

func TestDispatchWakeupsDurable(t *testing.T) {
	e := startMesh(t)
	c := e.client(t, "agent-park")
	ctx := ctxT(t)

	got := make(chan agent.Wakeup, 16)
	handler := func(w agent.Wakeup) error { got <- w; return nil }
	stop, err := c.Wakeups(ctx, handler)
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil { // idempotent
		t.Fatal(err)
	}

	p, err := c.Dispatch(ctx, agent.CallRequest{ToolName: echo.Name, AgentTurnID: "turn-park", Arguments: json.RawMessage(`{"x":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if p.ToolCallID == "" || p.ToolCallCardID == "" || p.StepID == "" || p.AgentTurnID != "turn-park" {
		t.Fatalf("pending = %+v", p)
	}
	// Wait until the result is in the inbox, so the wakeup was published
	// while no consumer ran.
	for {
		st, err := c.Resume(ctx, "turn-park")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Unconsumed) == 1 && st.Unconsumed[0].Entry != nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no result in the inbox")
		case <-time.After(50 * time.Millisecond):
		}
	}
	select {
	case w := <-got:
		t.Fatalf("stopped consumer delivered %+v", w)
	default:
	}

	stop, err = c.Wakeups(ctx, handler)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stop() }()
	select {
	case w := <-got:
		if w.ToolCallID != p.ToolCallID || w.AgentTurnID != "turn-park" || w.InboxID == "" || w.Traceparent != p.Traceparent || w.NumDelivered < 1 {
			t.Fatalf("wakeup = %+v, pending %+v", w, p)
		}
		if _, err := c.Ack(ctx, w.InboxID); err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the wakeup was not delivered after the restart")
	}
}

func TestWakeupsRetryOnError(t *testing.T) {
	e := startMesh(t)
	c := e.client(t, "agent-retry")
	ctx := ctxT(t)
	var mu sync.Mutex
	calls := 0
	done := make(chan agent.Wakeup, 1)
	stop, err := c.Wakeups(ctx, func(w agent.Wakeup) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return errors.New("not now")
		}
		done <- w
		return nil
	}, agent.WithRetryDelay(10*time.Millisecond), agent.WithSkipConsumed())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stop() }()
	p, err := c.Dispatch(ctx, agent.CallRequest{ToolName: echo.Name, AgentTurnID: "turn-r"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-done:
		if w.ToolCallID != p.ToolCallID || w.NumDelivered < 2 {
			t.Fatalf("wakeup = %+v", w)
		}
	case <-ctx.Done():
		t.Fatal("the wakeup was not redelivered after a handler error")
	}
}

func TestResumePhases(t *testing.T) {
	e := startMesh(t)
	c := e.client(t, "agent-res")
	ctx := ctxT(t)
	const turn = "turn-res"

	// Finished: a Call consumes and acknowledges its result.
	fin, err := c.Call(ctx, agent.CallRequest{ToolName: echo.Name, AgentTurnID: turn, StepID: "s1", ToolCallID: "fin"})
	if err != nil {
		t.Fatal(err)
	}
	// Outstanding: echo sleeps far longer than the test runs (the mesh's
	// stop cancels it).
	if _, err := c.Dispatch(ctx, agent.CallRequest{ToolName: echo.Name, AgentTurnID: turn, StepID: "s2", ToolCallID: "out",
		Arguments: json.RawMessage(`{"sleep_ms":60000}`)}); err != nil {
		t.Fatal(err)
	}
	// Unconsumed: dispatched, result reported, nobody acknowledged it.
	if _, err := c.Dispatch(ctx, agent.CallRequest{ToolName: echo.Name, AgentTurnID: turn, StepID: "s2", ToolCallID: "unc"}); err != nil {
		t.Fatal(err)
	}
	var st *agent.TurnState
	for {
		st, err = c.Resume(ctx, turn)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Unconsumed) == 1 && st.Unconsumed[0].Entry != nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no unconsumed result: %+v", st)
		case <-time.After(50 * time.Millisecond):
		}
	}
	ids := func(cs []agent.CallState) (out []string) {
		for _, c := range cs {
			out = append(out, c.ToolCallID)
		}
		return out
	}
	if got := ids(st.Calls); !reflect.DeepEqual(got, []string{"fin", "out", "unc"}) {
		t.Errorf("calls = %v", got)
	}
	if got := ids(st.Outstanding); !reflect.DeepEqual(got, []string{"out"}) {
		t.Errorf("outstanding = %v", got)
	}
	if got := ids(st.Unconsumed); !reflect.DeepEqual(got, []string{"unc"}) {
		t.Errorf("unconsumed = %v", got)
	}
	if got := ids(st.Finished); !reflect.DeepEqual(got, []string{"fin"}) {
		t.Errorf("finished = %v", got)
	}
	f := st.Finished[0]
	if f.Entry == nil || f.Entry.InboxID != fin.Wakeup.InboxID || f.Entry.State != inbox.StateAcked || f.ResultCard.CardID != fin.ResultCard.CardID {
		t.Errorf("finished = %+v", f)
	}
	o := st.Outstanding[0]
	if o.CallCard == nil || o.ResultCard != nil || o.ToolName != echo.Name || o.StepID != "s2" || o.Phase != agent.PhaseOutstanding {
		t.Errorf("outstanding = %+v", o)
	}
	u := st.Unconsumed[0]
	if u.Result == nil || u.Result.Status != card.StatusSuccess || u.AfterExecution != card.Suspend || u.Entry.State != inbox.StatePending {
		t.Errorf("unconsumed = %+v", u)
	}
	by := st.ByStep()
	if len(by["s1"]) != 1 || len(by["s2"]) != 2 {
		t.Errorf("by step = %v", by)
	}
}

func TestConcurrentCalls(t *testing.T) {
	e := startMesh(t)
	c := e.client(t, "agent-many")
	ctx := ctxT(t)
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
			out, err := c.Call(ctx, agent.CallRequest{ToolName: echo.Name, AgentTurnID: fmt.Sprintf("turn-%d", i%5), Arguments: args})
			if err != nil {
				errs <- fmt.Errorf("call %d: %w", i, err)
				return
			}
			var got struct{ I int }
			if err := json.Unmarshal(out.Result.Result, &got); err != nil || got.I != i {
				errs <- fmt.Errorf("call %d got result %s", i, out.Result.Result)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := c.Flush(ctx); err != nil { // the Calls' lazy acks are answered
		t.Fatal(err)
	}
	es, err := c.Inbox().List(ctx, project, inbox.ListQuery{AgentID: "agent-many"})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 0 {
		t.Errorf("%d inbox entries still pending", len(es))
	}
}

// A result already pending in the inbox when Call starts waiting (here: a
// call re-made with the tool_call_id of a dispatched one, whose duplicate
// report wakes no one) is found by the inbox read after publishing, with
// polling off.
func TestCallFindsPendingResult(t *testing.T) {
	e := startMesh(t)
	c, err := agent.New(e.nc, agent.Config{Project: project, Channel: channel, AgentID: "agent-again", Logger: quiet, PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	req := agent.CallRequest{ToolName: echo.Name, AgentTurnID: "turn-a", ToolCallID: "call-a", Arguments: json.RawMessage(`{"a":1}`)}
	if _, err := c.Dispatch(ctx, req); err != nil {
		t.Fatal(err)
	}
	var entry *inbox.Entry
	for entry == nil {
		st, err := c.Resume(ctx, "turn-a")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Unconsumed) == 1 && st.Unconsumed[0].Entry != nil {
			entry = st.Unconsumed[0].Entry
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no result in the inbox")
		case <-time.After(50 * time.Millisecond):
		}
	}
	out, err := c.Call(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if out.Wakeup.InboxID != entry.InboxID || out.ResultCard.CardID != entry.ToolResultCardID {
		t.Fatalf("outcome %+v, want the pending entry %+v", out.Wakeup, entry)
	}
	jsonEqual(t, out.Result.Result, req.Arguments)
	st, err := c.Resume(ctx, "turn-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Finished) != 1 || len(st.Calls) != 1 {
		t.Fatalf("after the call: %+v", st)
	}
}

func TestClosed(t *testing.T) {
	e := startMesh(t)
	c := e.client(t, "agent-closed")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctxT(t), agent.CallRequest{ToolName: echo.Name, AgentTurnID: "t"}); !errors.Is(err, agent.ErrClosed) {
		t.Fatalf("Call after Close = %v", err)
	}
}

// TestCollidingCallIDs: calls whose ids joined with "-" or "/" are equal
// (the old Nats-Msg-Id "cmd-<project>-<turn>-<call>" and the worker's old
// in-flight key "<project>/<turn>/<call>" collided for them) each get their
// own command, execution and result. Before utp.CallRef the second command
// was dropped by JetStream as a duplicate and its Call waited forever.
//
// The claim keys of the "/" pair differ too (cardstore.CallKey escapes
// the turn's '/').
func TestCollidingCallIDs(t *testing.T) {
	e := startMesh(t)
	c := e.client(t, "agent-collide")
	ctx := ctxT(t)
	for _, pair := range [][2][2]string{
		{{"t-1", "2"}, {"t", "1-2"}},
		{{"u/1", "2"}, {"u", "1/2"}},
	} {
		for i, ids := range pair {
			args := json.RawMessage(fmt.Sprintf(`{"which":%d}`, i))
			out, err := c.Call(ctx, agent.CallRequest{ToolName: echo.Name, Arguments: args, AgentTurnID: ids[0], ToolCallID: ids[1]})
			if err != nil {
				t.Fatalf("call turn %q call %q: %v", ids[0], ids[1], err)
			}
			if out.ResultCard.ToolCallID != ids[1] || out.ResultCard.Metadata.AgentTurnID != ids[0] {
				t.Errorf("call turn %q call %q got the result of turn %q call %q", ids[0], ids[1], out.ResultCard.Metadata.AgentTurnID, out.ResultCard.ToolCallID)
			}
			jsonEqual(t, out.Result.Result, args)
		}
	}
}

// A call re-made with the tool_call_id of one that finished (its entry
// acked, its command now a duplicate that JetStream drops) returns that
// result at once, with polling off (found by the deploy material's smoke
// script: `utpmesh call --tool-call-id X` a second time waited for its
// whole timeout).
func TestCallRemadeAfterItFinished(t *testing.T) {
	e := startMesh(t)
	c, err := agent.New(e.nc, agent.Config{Project: project, Channel: channel, AgentID: "agent-remade", Logger: quiet, PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	req := agent.CallRequest{ToolName: echo.Name, AgentTurnID: "turn-r", ToolCallID: "call-r", Arguments: json.RawMessage(`{"r":1}`)}
	first, err := c.Call(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Call(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if again.ResultCard.CardID != first.ResultCard.CardID || again.Wakeup.InboxID != first.Wakeup.InboxID {
		t.Fatalf("re-made call: card %s entry %s, want the first call's %s and %s",
			again.ResultCard.CardID, again.Wakeup.InboxID, first.ResultCard.CardID, first.Wakeup.InboxID)
	}
}

// TestCallRemadeAtNewEpoch: a runtime that restarts, declares a new epoch
// and re-makes a call that is still running gets its result, although the
// result lands as a stale entry (reported at the old epoch) that wakes no
// one: the re-made command is a duplicate JetStream drops, so only the
// inbox can answer, and a re-made call polls it for an entry in any state.
// It used to poll pending entries only and wait until its ctx ended.
func TestCallRemadeAtNewEpoch(t *testing.T) {
	e := startMesh(t)
	c := e.client(t, "agent-epoch")
	ctx := ctxT(t)
	req := agent.CallRequest{ToolName: echo.Name, AgentTurnID: "turn-e", ToolCallID: "call-e", TurnEpoch: 0,
		Arguments: json.RawMessage(`{"sleep_ms":1000}`)}
	if _, err := c.Dispatch(ctx, req); err != nil {
		t.Fatal(err)
	}
	// The "restart": a new epoch, and the same call again, made at it.
	if h, err := c.SetEpoch(ctx, "turn-e", 1); err != nil || h != 1 {
		t.Fatalf("SetEpoch = %d, %v", h, err)
	}
	req.TurnEpoch = 1
	out, err := c.Call(ctx, req)
	if err != nil {
		t.Fatalf("re-made call at the new epoch: %v", err)
	}
	if out.Result.Status != card.StatusSuccess || out.Wakeup.TurnEpoch != 0 {
		t.Fatalf("outcome: status %s, entry epoch %d; want success from the epoch-0 execution", out.Result.Status, out.Wakeup.TurnEpoch)
	}
	jsonEqual(t, out.Result.Result, json.RawMessage(`{"sleep_ms":1000}`))
	entry, err := e.m.Inbox().Get(ctx, project, out.Wakeup.InboxID)
	if err != nil || entry.State != inbox.StateStale {
		t.Fatalf("the call's entry = %+v, %v; want it stale (reported at epoch 0 after epoch 1 was declared)", entry, err)
	}
}

// TestCallInto: a successful result decodes into the caller's value; a
// failed call and a result of the wrong shape are the sentinel errors, with
// the Outcome.
func TestCallInto(t *testing.T) {
	e := startMesh(t)
	c := e.client(t, "agent-into")
	ctx := ctxT(t)
	var got struct {
		Msg string `json:"msg"`
	}
	if _, err := c.CallInto(ctx, agent.CallRequest{ToolName: echo.Name, Arguments: json.RawMessage(`{"msg":"hi"}`),
		AgentTurnID: "turn-into"}, &got); err != nil || got.Msg != "hi" {
		t.Fatalf("CallInto(echo) = %+v, %v; want msg hi", got, err)
	}
	tests := []struct {
		name string
		args string
		into any
		want error
	}{
		{"failed call", `{"sleep_ms":-1}`, &got, agent.ErrToolFailed},
		{"result of another shape", `{"msg":"hi"}`, new([]int), agent.ErrNoResult},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.CallInto(ctx, agent.CallRequest{ToolName: echo.Name, Arguments: json.RawMessage(tc.args),
				AgentTurnID: "turn-into"}, tc.into)
			if !errors.Is(err, tc.want) || out == nil {
				t.Fatalf("CallInto(%s) = %v, %v; want the outcome and %v", tc.args, out, err, tc.want)
			}
		})
	}
}
