package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/mesh/gatetest"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// whoTool answers the call's principal and agent id; opts make it
// operator-only.
func whoTool(name string, opts registry.Options) worker.Tool {
	return worker.Tool{Name: name, Options: opts, Handler: func(_ context.Context, c *worker.Call) (worker.Result, error) {
		return worker.OK(map[string]any{"principal": c.Principal, "agent_id": c.Command.AgentID}), nil
	}}
}

// TestOperatorConfig: Config.Operator's rules.
func TestOperatorConfig(t *testing.T) {
	nc := startMesh(t).nc
	for _, tc := range []struct {
		name string
		cfg  agent.Config
		want string // "" = valid
	}{
		{"agent id defaults", agent.Config{Project: "demo", Operator: "alice"}, ""},
		{"its own agent id", agent.Config{Project: "demo", Operator: "alice", AgentID: "op-alice"}, ""},
		{"another agent id", agent.Config{Project: "demo", Operator: "alice", AgentID: "demo-agent"}, `made as "op-alice"`},
		{"a mandate", agent.Config{Project: "demo", Operator: "alice", Mandate: "x.y.z"}, "carry no mandate"},
		{"raw commands", agent.Config{Project: "demo", Operator: "alice", RawCommands: true}, "unset Mandate and RawCommands"},
		{"not a token", agent.Config{Project: "demo", Operator: "al.ice"}, "Config.Operator"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := agent.New(nc, tc.cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.AgentID() != "op-alice" || c.Operator() != "alice" || c.WakeupSubject() != "cg.v1r3.demo.default.cmd.agent.op-alice.wakeup" {
					t.Fatalf("agent id %s, operator %s, wakeup %s", c.AgentID(), c.Operator(), c.WakeupSubject())
				}
				return
			}
			if !errors.Is(err, agent.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want ErrInvalid with %q", err, tc.want)
			}
		})
	}
}

// TestOperatorCall: an operator's client calls an operator-only tool
// through the mesh's admission (principal operator:<name>, agent id
// op-<name>, no mandate) and gets the result; its inbox entry is acked
// on op-<name>'s own inbox subject. An agent's call of the same tool is
// refused operator_only.
func TestOperatorCall(t *testing.T) {
	g := gatetest.Start(t, gatetest.Options{Tools: []worker.Tool{whoTool("ops_only", registry.Options{Principal: registry.PrincipalOperator})}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	op, err := agent.New(g.Conn(), agent.Config{Project: gatetest.Project, Operator: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	var v map[string]string
	out, err := op.CallInto(ctx, agent.CallRequest{ToolName: "ops_only", AgentTurnID: "turn-op"}, &v)
	if err != nil {
		t.Fatal(err)
	}
	if v["principal"] != "operator:alice" || v["agent_id"] != "op-alice" {
		t.Fatalf("operator call ran as %+v", v)
	}
	if err := op.Flush(ctx); err != nil { // Call's lazy ack is answered
		t.Fatal(err)
	}
	e, err := op.Inbox().Get(ctx, gatetest.Project, out.Wakeup.InboxID)
	if err != nil || e.State != inbox.StateAcked || e.AgentID != "op-alice" {
		t.Fatalf("operator's inbox entry = %+v, %v; want acked, agent op-alice", e, err)
	}

	ag := g.Agent(t, authz.DemoAgent, g.Demo)
	res, err := ag.Call(ctx, agent.CallRequest{ToolName: "ops_only", AgentTurnID: "turn-agent", Arguments: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	var d authz.AuthFailedDetail
	if r := res.Result; r.Status != card.StatusFailed || r.Error == nil || r.Error.Code != card.CodeAuthFailed ||
		json.Unmarshal(r.Error.Detail, &d) != nil || d.Reason != authz.ReasonOperatorOnly {
		t.Fatalf("agent's call of an operator-only tool = %+v, want auth_failed operator_only", r)
	}
}
