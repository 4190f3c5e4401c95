package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

func TestHappyPath(t *testing.T) {
	h := newHarness(t, worker.Config{})
	c := h.writeCall("echo", `{"msg":"hello","n":2}`)
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	h.publish(toolSubject("echo"), c.command("echo"), nats.Header{utp.HeaderTraceparent: {tp}})
	rep, msg := h.awaitReport(c.id)
	if rep.Status != card.StatusSuccess || rep.AfterExecution != card.Suspend || rep.AgentID != agentID ||
		rep.AgentTurnID != c.turn || rep.TurnEpoch != 1 || rep.StepID != "step-"+c.id {
		t.Fatalf("report = %+v", rep)
	}
	if got := msg.Header.Get(utp.HeaderTraceparent); got != tp {
		t.Fatalf("traceparent = %q, want %q passed through", got, tp)
	}
	if strings.Contains(string(msg.Data), `"result"`) {
		t.Fatalf("report carries an inline result: %s", msg.Data)
	}
	if msg.Header.Get(utp.HeaderAgentTurnID) != c.turn || msg.Header.Get(utp.HeaderTurnEpoch) != "1" {
		t.Fatalf("CG-* headers missing on the report: %v", msg.Header)
	}
	rc, tr := h.result(rep)
	if string(tr.Result) != `{"msg":"hello","n":2}` {
		t.Fatalf("result = %s", tr.Result)
	}
	md := rc.Metadata
	if md.StepID != c.card.Metadata.StepID || md.TraceID != c.card.Metadata.TraceID ||
		md.ParentStepID != c.card.Metadata.ParentStepID || md.FunctionName != "echo" || rc.ToolCallID != c.id {
		t.Fatalf("result metadata not copied from the tool.call card: %+v", md)
	}
	found, err := h.store.FindToolResult(context.Background(), project, c.turn, c.id)
	if err != nil || found.CardID != rc.CardID {
		t.Fatalf("FindToolResult = %v, %v", found, err)
	}
}

// countingTool counts executions.
func countingTool(n *atomic.Int32, result string) worker.Tool {
	return worker.Tool{
		Name: "count", Parameters: json.RawMessage(`{"type":"object"}`),
		Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
			n.Add(1)
			return worker.OK(json.RawMessage(result)), nil
		},
	}
}

func TestDuplicateCommandExecutesOnce(t *testing.T) {
	var n atomic.Int32
	h := newHarness(t, worker.Config{}, countingTool(&n, `{"ok":true}`))
	c := h.writeCall("count", `{}`)
	h.publish(toolSubject("count"), c.command("count"), nil)
	first, _ := h.awaitReport(c.id)
	h.publish(toolSubject("count"), c.command("count"), nil)
	second, _ := h.awaitReport(c.id)
	if n.Load() != 1 {
		t.Fatalf("executions = %d, want 1", n.Load())
	}
	if first.ToolResultCardID != second.ToolResultCardID {
		t.Fatalf("re-report pointed at %s, want the same card %s", second.ToolResultCardID, first.ToolResultCardID)
	}
}

func TestRefusedCommands(t *testing.T) {
	h := newHarness(t, worker.Config{})
	tests := []struct {
		name   string
		mutate func(m map[string]any)
		field  string
	}{
		{"inline args", func(m map[string]any) { m["args"] = map[string]any{"x": 1} }, "args"},
		{"inline arguments", func(m map[string]any) { m["arguments"] = map[string]any{} }, "arguments"},
		{"inline result", func(m map[string]any) { m["result"] = "x" }, "result"},
		{"missing after_execution", func(m map[string]any) { delete(m, "after_execution") }, "after_execution"},
		{"missing tool_call_card_id", func(m map[string]any) { delete(m, "tool_call_card_id") }, "tool_call_card_id"},
		{"bad after_execution", func(m map[string]any) { m["after_execution"] = "later" }, "after_execution"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := h.writeCall("echo", `{}`)
			cmd := c.command("echo")
			tt.mutate(cmd)
			h.publish(toolSubject("echo"), cmd, nil)
			rep, _ := h.awaitReport(c.id)
			_, tr := h.result(rep)
			if rep.Status != card.StatusFailed || tr.Error == nil || tr.Error.Code != card.CodeBadRequest ||
				!strings.Contains(tr.Error.Message, tt.field) {
				t.Fatalf("report %+v, error %+v: want failed bad_request naming %s", rep, tr.Error, tt.field)
			}
		})
	}
	// Without the routing fields no result can be addressed: dead letter.
	for _, missing := range []string{"agent_id", "agent_turn_id", "turn_epoch", "tool_call_id"} {
		t.Run("missing "+missing, func(t *testing.T) {
			c := h.writeCall("echo", `{}`)
			cmd := c.command("echo")
			delete(cmd, missing)
			h.publish(toolSubject("echo"), cmd, nil)
			d := h.awaitDeadLetter()
			if d.Field != missing || !strings.Contains(d.Reason, missing) || d.Source != "worker:echo" {
				t.Fatalf("dead letter = %+v, want field %s", d, missing)
			}
		})
	}
	t.Run("not json", func(t *testing.T) {
		h.publish(toolSubject("echo"), []byte("{not json"), nil)
		if d := h.awaitDeadLetter(); !strings.Contains(d.Reason, "not a JSON object") || d.Body != "{not json" {
			t.Fatalf("dead letter = %+v", d)
		}
	})
}

func TestUnknownFieldsIgnoredAndV1r4Headers(t *testing.T) {
	h := newHarness(t, worker.Config{})
	c := h.writeCall("echo", `{"a":1}`)
	cmd := c.command("echo")
	cmd["some_future_field"] = map[string]any{"x": []int{1}}
	h.publish(toolSubject("echo"), cmd, nil)
	if rep, _ := h.awaitReport(c.id); rep.Status != card.StatusSuccess {
		t.Fatalf("unknown field: status %s", rep.Status)
	}
	// CommonGround v1r4 sends identity in CG-* headers only.
	c2 := h.writeCall("echo", `{"b":2}`)
	body := map[string]any{"after_execution": "terminate", "tool_call_card_id": c2.card.CardID, "tool_name": "echo"}
	h.publish(toolSubject("echo"), body, nats.Header{
		utp.HeaderAgentID: {agentID}, utp.HeaderAgentTurnID: {c2.turn}, utp.HeaderTurnEpoch: {"1"}, utp.HeaderToolCallID: {c2.id},
	})
	rep, _ := h.awaitReport(c2.id)
	if rep.Status != card.StatusSuccess || rep.AfterExecution != card.Terminate || rep.AgentTurnID != c2.turn {
		t.Fatalf("v1r4 headers: report %+v", rep)
	}
}

func TestMissingAndMismatchedCard(t *testing.T) {
	h := newHarness(t, worker.Config{})
	c := h.writeCall("echo", `{}`)
	cmd := c.command("echo")
	cmd["tool_call_card_id"] = card.NewID()
	h.publish(toolSubject("echo"), cmd, nil)
	rep, _ := h.awaitReport(c.id)
	if _, tr := h.result(rep); tr.Error == nil || tr.Error.Code != card.CodeBadRequest || !strings.Contains(tr.Error.Message, "no such card") {
		t.Fatalf("missing card: %+v", tr.Error)
	}
	// A card of another tool.
	c2 := h.writeCall("other_tool", `{}`)
	h.publish(toolSubject("echo"), c2.command("echo"), nil)
	rep, _ = h.awaitReport(c2.id)
	if _, tr := h.result(rep); tr.Error == nil || !strings.Contains(tr.Error.Message, `calls tool "other_tool"`) {
		t.Fatalf("wrong tool: %+v", tr.Error)
	}
}

func TestSchemaViolationAndArgs(t *testing.T) {
	tool := worker.Tool{
		Name:       "typed",
		Parameters: json.RawMessage(`{"type":"object","required":["title"],"properties":{"title":{"type":"string"},"priority":{"type":"string"},"source":{"type":"string"}}}`),
		Options: registry.Options{Args: registry.Args{
			Defaults: map[string]json.RawMessage{"priority": json.RawMessage(`"medium"`)},
			Fixed:    map[string]json.RawMessage{"source": json.RawMessage(`"mesh"`)},
		}},
		Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
			return worker.OK(json.RawMessage(c.Arguments)), nil
		},
	}
	h := newHarness(t, worker.Config{}, tool)
	bad := h.writeCall("typed", `{"title":7}`)
	h.publish(toolSubject("typed"), bad.command("typed"), nil)
	rep, _ := h.awaitReport(bad.id)
	if _, tr := h.result(rep); tr.Error == nil || tr.Error.Code != card.CodeBadRequest || !strings.Contains(tr.Error.Message, "title") {
		t.Fatalf("schema violation: %+v", tr.Error)
	}
	good := h.writeCall("typed", `{"title":"x","source":"caller"}`)
	h.publish(toolSubject("typed"), good.command("typed"), nil)
	rep, _ = h.awaitReport(good.id)
	if _, tr := h.result(rep); string(tr.Result) != `{"priority":"medium","source":"mesh","title":"x"}` {
		t.Fatalf("defaults/fixed not applied: %s", tr.Result)
	}
}

func TestNotRegisteredInProject(t *testing.T) {
	h := newHarness(t, worker.Config{})
	if err := h.reg.Delete(context.Background(), project, "echo"); err != nil {
		t.Fatal(err)
	}
	c := h.writeCall("echo", `{}`)
	h.publish(toolSubject("echo"), c.command("echo"), nil)
	rep, _ := h.awaitReport(c.id)
	if _, tr := h.result(rep); tr.Error == nil || !strings.Contains(tr.Error.Message, "not registered in project") {
		t.Fatalf("unregistered: %+v", tr.Error)
	}
}

func TestTimeout(t *testing.T) {
	tool := echo.Tool()
	tool.Options.TimeoutSeconds = 0.2
	h := newHarness(t, worker.Config{}, tool)
	c := h.writeCall("echo", `{"sleep_ms":60000}`)
	h.publish(toolSubject("echo"), c.command("echo"), nil)
	rep, _ := h.awaitReport(c.id)
	if _, tr := h.result(rep); rep.Status != card.StatusTimeout || tr.Error == nil || tr.Error.Code != card.CodeToolTimeout {
		t.Fatalf("timeout: report %+v error %+v", rep, tr.Error)
	}
}

func TestControlOverride(t *testing.T) {
	h := newHarness(t, worker.Config{})
	c := h.writeCall("echo", `{"__cg_control":{"after_execution":"terminate"}}`)
	h.publish(toolSubject("echo"), c.command("echo"), nil) // command says suspend
	rep, _ := h.awaitReport(c.id)
	_, tr := h.result(rep)
	if rep.AfterExecution != card.Terminate || tr.AfterExecution != card.Terminate {
		t.Fatalf("__cg_control override ignored: report %s, card %s", rep.AfterExecution, tr.AfterExecution)
	}
}

func TestHandlerErrorsAndPanics(t *testing.T) {
	tools := []worker.Tool{
		{Name: "fails", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
			return worker.Result{}, worker.Fail(card.CodeUpstreamUnavailable, "the calendar API is down")
		}},
		{Name: "panics", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
			panic("boom")
		}},
		{Name: "plain", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
			return worker.Result{}, errors.New("disk full")
		}},
	}
	h := newHarness(t, worker.Config{}, tools...)
	for _, tc := range []struct{ tool, code, msg string }{
		{"fails", "upstream_unavailable", "calendar API is down"},
		{"panics", "internal_error", "panicked: boom"},
		{"plain", "internal_error", "disk full"},
	} {
		c := h.writeCall(tc.tool, `{}`)
		h.publish(toolSubject(tc.tool), c.command(tc.tool), nil)
		rep, _ := h.awaitReport(c.id)
		_, tr := h.result(rep)
		if rep.Status != card.StatusFailed || tr.Error == nil || string(tr.Error.Code) != tc.code || !strings.Contains(tr.Error.Message, tc.msg) {
			t.Errorf("%s: report %+v error %+v", tc.tool, rep, tr.Error)
		}
		if !strings.Contains(string(tr.Result), `"error_code":"`+tc.code+`"`) {
			t.Errorf("%s: result lacks error_code: %s", tc.tool, tr.Result)
		}
	}
}

func TestCancelInFlight(t *testing.T) {
	started := make(chan struct{}, 1)
	slow := worker.Tool{Name: "slow", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		return worker.Result{}, ctx.Err()
	}}
	h := newHarness(t, worker.Config{}, slow)
	c := h.writeCall("slow", `{}`)
	h.publish(toolSubject("slow"), c.command("slow"), nil)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("slow tool never started")
	}
	cc := h.writeCall("cancel_tool_call", `{"tool_call_id":"`+c.id+`","agent_turn_id":"`+c.turn+`"}`)
	h.publish(pmoSubject("cancel_tool_call"), cc.command("cancel_tool_call"), nil)
	crep, _ := h.awaitReport(cc.id)
	if _, tr := h.result(crep); crep.Status != card.StatusSuccess || !strings.Contains(string(tr.Result), `"outcome":"cancel_requested"`) {
		t.Fatalf("cancel_tool_call: %+v %s", crep, tr.Result)
	}
	rep, _ := h.awaitReport(c.id)
	if _, tr := h.result(rep); rep.Status != card.StatusCanceled || tr.Error == nil || tr.Error.Code != card.CodeCanceled {
		t.Fatalf("canceled call: %+v %+v", rep, tr.Error)
	}
	// Canceling a finished call leaves it unchanged.
	again := h.writeCall("cancel_tool_call", `{"tool_call_id":"`+c.id+`","agent_turn_id":"`+c.turn+`"}`)
	h.publish(pmoSubject("cancel_tool_call"), again.command("cancel_tool_call"), nil)
	arep, _ := h.awaitReport(again.id)
	if _, tr := h.result(arep); !strings.Contains(string(tr.Result), `"outcome":"finished"`) || !strings.Contains(string(tr.Result), rep.ToolResultCardID) {
		t.Fatalf("cancel of a finished call: %s", tr.Result)
	}
}

func TestCancelBeforeExecution(t *testing.T) {
	var n atomic.Int32
	h := newHarness(t, worker.Config{}, countingTool(&n, `{}`))
	c := h.writeCall("count", `{}`)
	cc := h.writeCall("cancel_tool_call", `{"tool_call_id":"`+c.id+`","agent_turn_id":"`+c.turn+`"}`)
	h.publish(pmoSubject("cancel_tool_call"), cc.command("cancel_tool_call"), nil)
	if crep, _ := h.awaitReport(cc.id); crep.Status != card.StatusSuccess {
		t.Fatalf("cancel: %+v", crep)
	}
	h.publish(toolSubject("count"), c.command("count"), nil)
	rep, _ := h.awaitReport(c.id)
	if rep.Status != card.StatusCanceled || n.Load() != 0 {
		t.Fatalf("status %s, executions %d: want canceled and never executed", rep.Status, n.Load())
	}
}

func TestListTools(t *testing.T) {
	h := newHarness(t, worker.Config{})
	c := h.writeCall("list_tools", `{}`)
	h.publish(pmoSubject("list_tools"), c.command("list_tools"), nil)
	rep, _ := h.awaitReport(c.id)
	_, tr := h.result(rep)
	var out struct {
		Tools []struct {
			Name    string `json:"name"`
			Builtin bool   `json:"builtin"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(tr.Result, &out); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tl := range out.Tools {
		names[tl.Name] = true
	}
	if !names["echo"] || !names["list_tools"] || !names["cancel_tool_call"] {
		t.Fatalf("list_tools = %s", tr.Result)
	}
	// PMO built-ins require step_id.
	c2 := h.writeCall("list_tools", `{}`)
	cmd := c2.command("list_tools")
	delete(cmd, "step_id")
	h.publish(pmoSubject("list_tools"), cmd, nil)
	rep, _ = h.awaitReport(c2.id)
	if _, tr := h.result(rep); tr.Error == nil || !strings.Contains(tr.Error.Message, "step_id") {
		t.Fatalf("pmo without step_id: %+v", tr.Error)
	}
}

// TestPoisonCommand simulates a call whose executions keep dying (a tool
// that crashes its worker): after the limit, the next attempt fails the call
// instead of running it again.
func TestPoisonCommand(t *testing.T) {
	var n atomic.Int32
	h := newHarness(t, worker.Config{MaxDeliveries: 2, ClaimLease: 200 * time.Millisecond}, countingTool(&n, `{}`))
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.rt.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	c := h.writeCall("count", `{}`)
	// Two workers claimed the call and died without finishing.
	key := cardstore.CallKey{AgentTurnID: c.turn, ToolCallID: c.id}.String()
	for _, dead := range []string{"dead-1", "dead-2"} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := h.store.Claim(context.Background(), cardstore.ClaimRequest{ProjectID: project, Key: key, Holder: dead, Lease: cardstore.MinLease})
			if err == nil {
				break
			}
			if !errors.Is(err, cardstore.ErrClaimHeld) || time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	rt2, err := worker.New(h.nc, worker.Config{Store: h.store, Registry: h.reg, MaxDeliveries: 2, ClaimLease: 200 * time.Millisecond}, countingTool(&n, `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer rt2.Stop(context.Background())
	h.publish(toolSubject("count"), c.command("count"), nil)
	rep, _ := h.awaitReport(c.id)
	_, tr := h.result(rep)
	if rep.Status != card.StatusFailed || tr.Error.Code != card.CodeInternalError || !strings.Contains(tr.Error.Message, "gave up after 2 executions") || n.Load() != 0 {
		t.Fatalf("poison: report %+v error %+v executions %d", rep, tr.Error, n.Load())
	}
}

// TestMalformedDuplicateDoesNotWin: a malformed copy of a command whose call
// is running waits instead of writing the call's one result.
func TestMalformedDuplicateDoesNotWin(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	slow := worker.Tool{Name: "slow", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
		started <- struct{}{}
		<-release
		return worker.OK(map[string]bool{"real": true}), nil
	}}
	h := newHarness(t, worker.Config{}, slow)
	c := h.writeCall("slow", `{}`)
	h.publish(toolSubject("slow"), c.command("slow"), nil)
	<-started
	bad := c.command("slow")
	bad["args"] = map[string]any{"x": 1}
	h.publish(toolSubject("slow"), bad, nil)
	time.Sleep(300 * time.Millisecond) // let the malformed copy be handled (and deferred)
	close(release)
	rep, _ := h.awaitReport(c.id)
	if _, tr := h.result(rep); rep.Status != card.StatusSuccess || string(tr.Result) != `{"real":true}` {
		t.Fatalf("the call's result is %+v %s, want the real success", rep, tr.Result)
	}
}

func TestGracefulStopCancelsInFlight(t *testing.T) {
	started := make(chan struct{}, 1)
	slow := worker.Tool{Name: "slow", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		return worker.Result{}, ctx.Err()
	}}
	h := newHarness(t, worker.Config{}, slow)
	c := h.writeCall("slow", `{}`)
	h.publish(toolSubject("slow"), c.command("slow"), nil)
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := h.rt.Stop(ctx); !errors.Is(err, worker.ErrDrainTimeout) {
		t.Fatalf("Stop with a call in flight past the deadline = %v, want ErrDrainTimeout", err)
	}
	rep, _ := h.awaitReport(c.id)
	if _, tr := h.result(rep); rep.Status != card.StatusCanceled || !strings.Contains(tr.Error.Message, "shut down") {
		t.Fatalf("in-flight call at shutdown: %+v %+v", rep, tr.Error)
	}
}

func TestNewValidates(t *testing.T) {
	h := newHarness(t, worker.Config{})
	cases := []struct {
		name  string
		cfg   worker.Config
		tools []worker.Tool
	}{
		{"no store", worker.Config{Registry: h.reg}, []worker.Tool{echo.Tool()}},
		{"no tools", worker.Config{Store: h.store, Registry: h.reg}, nil},
		{"no handler", worker.Config{Store: h.store, Registry: h.reg}, []worker.Tool{{Name: "x"}}},
		{"reserved name", worker.Config{Store: h.store, Registry: h.reg}, []worker.Tool{{Name: "list_tools", Handler: echo.Tool().Handler}}},
		{"duplicate", worker.Config{Store: h.store, Registry: h.reg}, []worker.Tool{echo.Tool(), echo.Tool()}},
		{"bad project", worker.Config{Store: h.store, Registry: h.reg, Projects: []string{"a.b"}}, []worker.Tool{echo.Tool()}},
	}
	for _, tc := range cases {
		if _, err := worker.New(h.nc, tc.cfg, tc.tools...); err == nil {
			t.Errorf("%s: New accepted it", tc.name)
		}
	}
}
