package toolkit_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

func goodSpec() toolkit.Spec {
	return toolkit.Spec{Name: "t_get", Target: "cat.t_get", CedarAction: `Cat::"t_get"`, Params: `{"type":"object"}`}
}

func TestSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*toolkit.Spec)
		want string // "" = valid
	}{
		{"complete", func(*toolkit.Spec) {}, ""},
		{"no name", func(s *toolkit.Spec) { s.Name = "" }, "no Name"},
		{"no target", func(s *toolkit.Spec) { s.Target = "" }, "no Target"},
		{"no cedar action", func(s *toolkit.Spec) { s.CedarAction = "" }, "no CedarAction"},
		{"negative timeout", func(s *toolkit.Spec) { s.Timeout = -1 }, "negative Timeout"},
		{"params not json", func(s *toolkit.Spec) { s.Params = "{" }, "Params is not JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := goodSpec()
			tc.edit(&s)
			err := s.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, toolkit.ErrSpec) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrSpec naming %q", err, tc.want)
			}
		})
	}
}

func TestSpecOptions(t *testing.T) {
	s := goodSpec()
	s.Scopes, s.Risk, s.Operator, s.Confirmation, s.Timeout = []string{"READ"}, registry.RiskHigh, true, registry.ConfirmAlways, 1500*1e6
	o := s.Options()
	if o.CedarAction != s.CedarAction || o.RiskLevel != registry.RiskHigh || o.Principal != registry.PrincipalOperator ||
		o.Confirmation != registry.ConfirmAlways || len(o.Scopes) != 1 || o.Scopes[0] != "READ" || o.TimeoutSeconds != 1.5 {
		t.Fatalf("options %+v", o)
	}
	s.Scopes[0] = "CHANGED"
	if o.Scopes[0] != "READ" {
		t.Fatal("options share the spec's scopes")
	}
	agentTool := goodSpec()
	if p := agentTool.Options().Principal; p != "" {
		t.Fatalf("agent tool principal %q", p)
	}
}

func call(principal string, adm *utp.Admission, args string) *worker.Call {
	return &worker.Call{ProjectID: "demo", ToolName: "t_get", Principal: principal, Admission: adm, Arguments: json.RawMessage(args),
		Command: utp.Command{AgentID: "a1", AgentTurnID: "turn-1", ToolCallID: "call-1"}}
}

func TestCallerOf(t *testing.T) {
	for _, tc := range []struct {
		name      string
		principal string
		adm       *utp.Admission
		want      string
	}{
		{"plain agent call", "", nil, "agent:a1"},
		{"admitted agent", "agent:a1", &utp.Admission{Principal: "agent:a1"}, "agent:a1"},
		{"admitted operator", "operator:ops", &utp.Admission{Principal: "operator:ops"}, "operator:ops"},
		// Escalations: a principal the call claims without the mesh's
		// admission, or another than the admission's, is the agent's.
		{"claimed operator, no admission", "operator:ops", nil, "agent:a1"},
		{"operator not the admission's", "operator:ops", &utp.Admission{Principal: "agent:a1"}, "agent:a1"},
		{"operator without a name", "operator:", &utp.Admission{Principal: "operator:"}, "agent:a1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := call(tc.principal, tc.adm, `{}`)
			if got := toolkit.Actor(c); got != tc.want {
				t.Fatalf("actor %q, want %q", got, tc.want)
			}
			if toolkit.CallerOf(c).IsOperator() != strings.HasPrefix(tc.want, "operator:") {
				t.Fatal("IsOperator disagrees with Actor")
			}
		})
	}
}

func TestBind(t *testing.T) {
	var v struct {
		Limit int `json:"limit"`
	}
	for _, tc := range []struct {
		args, want string
	}{
		{`{"limit":3}`, ""},
		{`{"limit":"x"}`, "limit"},
		{`[1]`, "cannot unmarshal array"},
	} {
		err := toolkit.Bind(json.RawMessage(tc.args), &v)
		if tc.want == "" {
			if err != nil || v.Limit != 3 {
				t.Fatalf("%s: %v %+v", tc.args, err, v)
			}
			continue
		}
		var ce *card.Error
		if !errors.As(err, &ce) || ce.Code != card.CodeBadRequest || !strings.Contains(ce.Message, tc.want) || !strings.HasPrefix(ce.Message, "arguments: ") {
			t.Fatalf("%s: %v, want bad_request naming %q", tc.args, err, tc.want)
		}
	}
}

func TestHooks(t *testing.T) {
	limited := worker.Fail("rate_limited", "over the limit")
	for _, tc := range []struct {
		name    string
		guards  []toolkit.Guard
		runErr  error
		wantErr error
		wantRun bool
	}{
		{"no guards", nil, nil, nil, true},
		{"guard passes", []toolkit.Guard{func(context.Context, *toolkit.Spec, *worker.Call) error { return nil }}, nil, nil, true},
		{"guard refuses", []toolkit.Guard{func(context.Context, *toolkit.Spec, *worker.Call) error { return limited }}, nil, limited, false},
		{"second guard refuses", []toolkit.Guard{func(context.Context, *toolkit.Spec, *worker.Call) error { return nil },
			func(context.Context, *toolkit.Spec, *worker.Call) error { return limited }}, nil, limited, false},
		{"handler fails", nil, worker.ErrRetryLater, worker.ErrRetryLater, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran := false
			var audited *toolkit.Outcome
			s := goodSpec()
			tool, err := s.Tool(func(ctx context.Context, _ *worker.Call) (worker.Result, error) {
				ran = true
				toolkit.Annotate(ctx, "detail")
				return worker.OK("v"), tc.runErr
			}, toolkit.Hooks{Guards: tc.guards, Audit: func(_ context.Context, o *toolkit.Outcome) { audited = o }})
			if err != nil {
				t.Fatal(err)
			}
			_, err = tool.Handler(context.Background(), call("", nil, `{}`))
			if !errors.Is(err, tc.wantErr) || ran != tc.wantRun {
				t.Fatalf("err %v ran %v; want %v ran %v", err, ran, tc.wantErr, tc.wantRun)
			}
			if audited == nil || audited.Spec.Name != s.Name || !errors.Is(audited.Err, tc.wantErr) || audited.Call.Command.ToolCallID != "call-1" {
				t.Fatalf("audit saw %+v", audited)
			}
			if want := map[bool]any{true: "detail", false: nil}[tc.wantRun]; audited.Detail != want {
				t.Fatalf("audit detail %v, want %v", audited.Detail, want)
			}
		})
	}
}

func TestToolsRefusesBadDefs(t *testing.T) {
	run := toolkit.Value(func(context.Context, *worker.Call) (any, error) { return 1, nil })
	if _, err := toolkit.Tools(toolkit.Hooks{}, toolkit.Def{Spec: goodSpec(), Run: run}, toolkit.Def{Spec: goodSpec(), Run: run}); !errors.Is(err, toolkit.ErrSpec) || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("duplicate: %v", err)
	}
	if _, err := toolkit.Tools(toolkit.Hooks{}, toolkit.Def{Spec: goodSpec()}); !errors.Is(err, toolkit.ErrSpec) || !strings.Contains(err.Error(), "no handler") {
		t.Fatalf("no handler: %v", err)
	}
	ts, err := toolkit.Tools(toolkit.Hooks{}, toolkit.Def{Spec: goodSpec(), Run: run})
	if err != nil || len(ts) != 1 || ts[0].Target != "cat.t_get" || string(ts[0].Parameters) != `{"type":"object"}` {
		t.Fatalf("%v %+v", err, ts)
	}
}

func TestValue(t *testing.T) {
	partial := worker.Result{Status: card.StatusPartial, Value: 2}
	for _, tc := range []struct {
		v    any
		want worker.Result
	}{{1, worker.OK(1)}, {partial, partial}} {
		r, err := toolkit.Value(func(context.Context, *worker.Call) (any, error) { return tc.v, nil })(context.Background(), call("", nil, `{}`))
		if err != nil || r.Status != tc.want.Status || r.Value != tc.want.Value {
			t.Fatalf("%v: %+v %v", tc.v, r, err)
		}
	}
}

func TestNeedsConfirm(t *testing.T) {
	count := func(args json.RawMessage) int { return strings.Count(string(args), ",") + 1 }
	for _, tc := range []struct {
		rule  registry.Confirmation
		count func(json.RawMessage) int
		args  string
		want  bool
	}{
		{registry.ConfirmAlways, nil, `[1]`, true},
		{registry.ConfirmNever, count, `[1,2]`, false},
		{"", count, `[1,2]`, false},
		{registry.ConfirmWhenMultiple, count, `[1]`, false},
		{registry.ConfirmWhenMultiple, count, `[1,2]`, true},
		{registry.ConfirmWhenMultiple, nil, `[1,2]`, false},
	} {
		if got := toolkit.NeedsConfirm(tc.rule, tc.count, json.RawMessage(tc.args)); got != tc.want {
			t.Errorf("%s %s: %v", tc.rule, tc.args, got)
		}
		if toolkit.Confirmable(tc.rule) != (tc.rule == registry.ConfirmAlways || tc.rule == registry.ConfirmWhenMultiple) {
			t.Errorf("Confirmable(%s)", tc.rule)
		}
	}
}
