package tooltest_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/toolkit"
	"github.com/utpmesh/utpmesh/services/toolkit/tooltest"
)

// catalogue is a small catalogue built with the toolkit: an echo of its
// caller and argument, a guard that refuses agent "blocked" (a rate
// limit's place), an operator-only tool, and an audit hook.
type catalogue struct {
	mu      sync.Mutex
	audited []string
}

func (c *catalogue) tools(t testing.TB) []worker.Tool {
	who := toolkit.Value(func(_ context.Context, call *worker.Call) (any, error) {
		var a struct {
			Say string `json:"say"`
			N   int    `json:"n"`
		}
		if err := toolkit.Bind(call.Arguments, &a); err != nil {
			return nil, err
		}
		return map[string]string{"actor": toolkit.Actor(call), "say": a.Say}, nil
	})
	hooks := toolkit.Hooks{
		Guards: []toolkit.Guard{
			func(_ context.Context, sp *toolkit.Spec, call *worker.Call) error {
				if call.Command.AgentID == "blocked" {
					return worker.Fail("rate_limited", "agent blocked is over its limit")
				}
				if sp.Operator && !toolkit.CallerOf(call).IsOperator() {
					return worker.Fail(card.CodeAuthFailed, sp.Name+" is an operator's tool")
				}
				return nil
			},
		},
		Audit: func(_ context.Context, o *toolkit.Outcome) {
			c.mu.Lock()
			defer c.mu.Unlock()
			status := "ok"
			if o.Err != nil {
				status = "failed"
			}
			c.audited = append(c.audited, o.Spec.Name+" "+toolkit.Actor(o.Call)+" "+status)
		},
	}
	ts, err := toolkit.Tools(hooks,
		toolkit.Def{Spec: toolkit.Spec{Name: "kit_who", Target: "kit.kit_who", CedarAction: `Kit::"who"`,
			Params: `{"type":"object","properties":{"say":{"type":"string"}}}`}, Run: who},
		toolkit.Def{Spec: toolkit.Spec{Name: "kit_admin", Target: "kit.kit_admin", CedarAction: `Kit::"admin"`, Operator: true}, Run: who},
	)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func (c *catalogue) audit() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.audited...)
}

func TestHarness(t *testing.T) {
	cat := &catalogue{}
	tools := cat.tools(t)
	h := tooltest.Start(t, mesh.Config{Tools: tools})

	call := func(agentID, tool string, args any) *tooltest.Result {
		return h.Call(h.Agent(agentID, ""), agent.CallRequest{ToolName: tool, Arguments: h.Args(args), AgentTurnID: "turn-" + agentID})
	}
	for _, tc := range []struct {
		name, agent, tool string
		args              any
		wantCode          card.ErrorCode // "" = success
		wantActor         string
	}{
		{"agent call through the mesh", "a1", "kit_who", map[string]string{"say": "hi"}, "", "agent:a1"},
		{"argument the schema refuses", "a1", "kit_who", map[string]int{"say": 3}, card.CodeBadRequest, ""},
		{"argument Bind refuses", "a1", "kit_who", map[string]string{"n": "x"}, card.CodeBadRequest, ""},
		{"guard refuses", "blocked", "kit_who", map[string]string{}, "rate_limited", ""},
		{"operator tool refused to an agent", "a1", "kit_admin", map[string]string{}, card.CodeAuthFailed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := call(tc.agent, tc.tool, tc.args)
			if tc.wantCode != "" {
				if r.Status != card.StatusFailed || r.Error == nil || r.Error.Code != tc.wantCode {
					t.Fatalf("status %s error %+v, want failed %s", r.Status, r.Error, tc.wantCode)
				}
				return
			}
			var v map[string]string
			if r.Status != card.StatusSuccess || json.Unmarshal(r.Raw, &v) != nil || v["actor"] != tc.wantActor || v["say"] != "hi" {
				t.Fatalf("status %s result %s error %+v", r.Status, r.Raw, r.Error)
			}
		})
	}

	t.Run("admitted operator call", func(t *testing.T) {
		r := h.Admitted(tools, "kit_admin", tooltest.Operator("ops", "turn-ops", json.RawMessage(`{"say":"hi"}`)))
		if r.Status != card.StatusSuccess || tooltest.Str(decode(t, r.Raw), "actor") != "operator:ops" {
			t.Fatalf("%s %s %+v", r.Status, r.Raw, r.Error)
		}
	})
	t.Run("operator principal without the mesh's admission is an agent", func(t *testing.T) {
		a := tooltest.Operator("mallory", "turn-forged", json.RawMessage(`{}`))
		a.Admission = nil
		if r := h.Admitted(tools, "kit_admin", a); r.Status != card.StatusFailed || r.Error.Code != card.CodeAuthFailed {
			t.Fatalf("%s %+v", r.Status, r.Error)
		}
	})

	// An agent's call of the operator-only kit_admin is refused by the
	// mesh's admission: the tool never sees it, so it leaves no record.
	want := []string{"kit_who agent:a1 ok", "kit_who agent:a1 failed", "kit_who agent:blocked failed",
		"kit_admin operator:ops ok", "kit_admin agent:mallory failed"}
	got := cat.audit()
	if len(got) != len(want) {
		t.Fatalf("audit %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("audit %q, want %q", got, want)
		}
	}
}

func decode(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
