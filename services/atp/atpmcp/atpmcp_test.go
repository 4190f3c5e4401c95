package atpmcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge/mcptest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/services/atp/atpmcp"
	"github.com/utpmesh/utpmesh/services/atp/internal/atptest"
)

// ATP's renderer of HEM tasks, registered as the command line does, for
// a bridge given operator credentials: the operator's calls run through
// the harness's operator (atptest.Harness.Operator, the in-process stand-in
// for the mesh's operator dispatch).
func init() { mcpbridge.RegisterHandoff(atpmcp.HEM{Operator: asOperator}) }

// operatorMesh is the harness whose operator the bridge's credentials are
// (startMesh sets it; the tests of this package do not run in parallel).
var operatorMesh *atptest.Harness

// asOperator makes one call as the operator "alice" of operatorMesh.
func asOperator(ctx context.Context, tool string, args json.RawMessage) (*agent.Outcome, error) {
	r := operatorMesh.Operator("alice").Call(tool, args)
	res := &card.ToolResultContent{Status: r.Status, Result: r.Raw, Error: r.Error}
	return &agent.Outcome{Call: agent.Pending{AgentTurnID: r.Turn, ToolCallID: r.ToolCallID}, ResultCard: &card.Card{CardID: card.NewID()}, Result: res}, nil
}

// TestResolveWithoutOperator: a bridge without operator credentials never
// decides a HEM task as the session's agent; it says what an operator
// runs.
func TestResolveWithoutOperator(t *testing.T) {
	for _, yes := range []bool{true, false} {
		called := 0
		_, err := atpmcp.HEM{}.Resolve(context.Background(), func(context.Context, string, json.RawMessage) (*agent.Outcome, error) {
			called++
			return nil, errors.New("unexpected")
		}, "hem_x", yes, "no", "")
		if !errors.Is(err, atpmcp.ErrNoOperator) || called != 0 || !strings.Contains(err.Error(), "utpmesh hem confirm hem_x") || !strings.Contains(err.Error(), "utpmesh hem decline hem_x") {
			t.Fatalf("yes=%v: %v, %d calls as the agent", yes, err, called)
		}
	}
}

// Mandate policies: an agent that may escalate with HEM-MANDATE-01, and
// an operator who may also list, confirm and decline HEM tasks.
const (
	hemInvoker  = `permit(principal, action == ATPAction::"invoke_hem", resource) when { ["HEM-MANDATE-01"].contains(context.hem_id) };`
	hemOperator = hemInvoker + "\npermit(principal, action in [ATPAdminAction::\"hem_list\", ATPAdminAction::\"hem_confirm\", ATPAdminAction::\"hem_decline\"], resource);"
)

var invokeHEM = map[string]any{"hem_id": "HEM-MANDATE-01",
	"context": map[string]any{"trigger_reason": "MANDATE_GAP_DETECTED", "agent_assessment": "the mandate lacks get_context_package"}}

// TestHEMConfirmationAsElicitation: an atp_invoke_hem waiting for an
// operator is asked as an elicitation when the host's mandate is an
// operator's; confirm runs atp_hem_confirm (with the task's token) and
// the task is COMPLETE, "false" with a reason runs atp_hem_decline; a host
// without elicitation, or whose mandate is not an operator's, gets the
// PENDING result and the task id.
func TestHEMConfirmationAsElicitation(t *testing.T) {
	f := startMesh(t)
	n := 0
	agent := func() string { n++; return fmt.Sprintf("host-%d", n) } // invoke_hem is rate limited per agent
	mcptest.Each(t, func(t *testing.T, tr mcptest.Transport, ver string) {
		for _, tc := range []struct {
			name    string
			answer  *sdk.ElicitResult
			status  string
			explain string
		}{
			{"confirm", mcptest.Confirm(true, ""), "COMPLETE", ""},
			{"decline", mcptest.Confirm(false, "not this week"), "DECLINED", "not this week"},
			{"refuse", &sdk.ElicitResult{Action: "decline"}, "DECLINED", "declined by the operator in an MCP host"},
		} {
			var asked []string
			cs, _ := f.connect(t, tr, ver, f.issue(t, agent(), hemOperator), mcptest.Answer(tc.answer, &asked))
			res := mcptest.CallTool(t, cs, "atp_invoke_hem", invokeHEM)
			s := mcptest.Structured(t, res)
			if res.IsError || s["status"] != tc.status || len(asked) != 1 || !strings.Contains(asked[0], "asks an operator to confirm HEM task") {
				t.Fatalf("%s: isError %v, structured %v, text %q, asked %q", tc.name, res.IsError, s, mcptest.Text(res), asked)
			}
			if tc.explain != "" && s["reason"] != tc.explain {
				t.Fatalf("%s: reason %v, want %q", tc.name, s["reason"], tc.explain)
			}
		}
		// No elicitation: the pending result and its task id.
		cs, _ := f.connect(t, tr, ver, f.issue(t, agent(), hemOperator), nil)
		res := mcptest.CallTool(t, cs, "atp_invoke_hem", invokeHEM)
		s := mcptest.Structured(t, res)
		id, _ := s["task_id"].(string)
		if res.IsError || s["status"] != "PENDING" || id == "" || !strings.Contains(mcptest.Text(res), `atp_hem_confirm {"task_id":"`+id+`"}`) ||
			!strings.Contains(mcptest.Text(res), "cannot answer elicitations") && !strings.Contains(mcptest.Text(res), "did not answer the elicitation") {
			t.Fatalf("no elicitation: isError %v, structured %v, text %q", res.IsError, s, mcptest.Text(res))
		}
		// The host's agent cannot decide it itself, even with a mandate
		// that names the tools; the operator can.
		if res = mcptest.CallTool(t, cs, "atp_hem_decline", map[string]any{"task_id": id, "reason": "by the host"}); !res.IsError || !strings.Contains(mcptest.Text(res), "operator only") {
			t.Fatalf("atp_hem_decline by the host's agent: %q", mcptest.Text(res))
		}
		if out := f.h.Operator("alice").OK("atp_hem_decline", map[string]any{"task_id": id, "reason": "by the operator"}).Obj(); out["status"] != "DECLINED" {
			t.Fatalf("atp_hem_decline by the operator: %v", out)
		}
		// A bridge with operator credentials asks the host whatever its
		// mandate (the person at the host decides as that operator)...
		var asked []string
		cs, _ = f.connect(t, tr, ver, f.issue(t, agent(), hemInvoker), mcptest.Answer(mcptest.Confirm(true, ""), &asked))
		res = mcptest.CallTool(t, cs, "atp_invoke_hem", invokeHEM)
		if s := mcptest.Structured(t, res); res.IsError || s["status"] != "COMPLETE" || len(asked) != 1 {
			t.Fatalf("operator bridge, agent's mandate: isError %v, structured %v, text %q, asked %q", res.IsError, s, mcptest.Text(res), asked)
		}
		// ... one without them asks no host whose mandate is not an
		// operator's.
		n := 0
		cs, _ = f.connect(t, tr, ver, f.issue(t, agent(), hemInvoker), func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			n++
			return &sdk.ElicitResult{Action: "accept"}, nil
		}, atpmcp.HEM{})
		res = mcptest.CallTool(t, cs, "atp_invoke_hem", invokeHEM)
		if s := mcptest.Structured(t, res); res.IsError || s["status"] != "PENDING" || n != 0 || !strings.Contains(mcptest.Text(res), "not an operator's") {
			t.Fatalf("not an operator: isError %v, structured %v, text %q, asked %d", res.IsError, s, mcptest.Text(res), n)
		}
	})
}

// TestHEMTaskThroughToResult: atp_invoke_hem called as a task works until
// an operator decides; the task's result is the .hem-result call the ATP
// service writes into the turn, read through a new bridge.
func TestHEMTaskThroughToResult(t *testing.T) {
	f := startMesh(t)
	n := 0
	mcptest.EachTransport(t, func(t *testing.T, tr mcptest.Transport) {
		n++
		agentID := fmt.Sprintf("hem-agent-%d", n)
		tok := f.issue(t, agentID, hemOperator)
		tb := serveTasks(t, f.m, tr, tok)
		// The first result (PENDING) wakes the agent: wait for that.
		woken, err := f.m.Conn().SubscribeSync("cg.v1r3.demo.*.cmd.agent." + agentID + ".wakeup")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = woken.Unsubscribe() }()
		task := tb.StartTask(t, "atp_invoke_hem", invokeHEM)
		if _, err := woken.NextMsg(time.Minute); err != nil {
			t.Fatalf("no wakeup for the first result: %v", err)
		}
		g := tb.Get(t, task.TaskId)
		hemTask, _, _ := strings.Cut(strings.TrimPrefix(g.StatusMessage, "HEM task "), " ")
		if g.Status != mcp.TaskStatusWorking || !strings.HasPrefix(hemTask, "hem_") {
			t.Fatalf("tasks/get while PENDING = %+v", g)
		}
		if _, rerr := tb.RPCErr(t, "tasks/cancel", map[string]any{"taskId": task.TaskId}); rerr == nil || !strings.Contains(rerr.Message, "only an operator ends it") {
			t.Fatalf("tasks/cancel of a HEM task waiting for an operator: %+v", rerr)
		}
		tb.Stop()
		second := serveTasks(t, f.m, tr, tok)
		r := second.AwaitResult(t, task.TaskId, func() {
			// The operator declines it (the host's agent may not).
			if out := f.h.Operator("alice").Call("atp_hem_decline", map[string]any{"task_id": hemTask, "reason": "task test"}); out.Status != card.StatusSuccess {
				t.Errorf("atp_hem_decline: %+v", out.Error)
			}
		})
		if r.IsError || !strings.Contains(mcptest.TextContent(r.Content), `"status":"DECLINED"`) || !strings.HasSuffix(fmt.Sprint(r.Meta.AdditionalFields["utpmesh/result_tool_call_id"]), ".hem-result") {
			t.Fatalf("tasks/result = %+v", r)
		}
		if g := second.Get(t, task.TaskId); g.Status != mcp.TaskStatusCompleted {
			t.Fatalf("tasks/get after the decision = %+v", g)
		}
	})
}
