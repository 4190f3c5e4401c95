package atpmcp_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
	"github.com/utpmesh/utpmesh/services/atp/atpmcp"
)

// ATP's renderer of HEM tasks, registered as the command line does.
func init() { mcpbridge.RegisterHandoff(atpmcp.HEM{}) }

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
	agent := func() string { n++; return fmt.Sprintf("op-%d", n) } // invoke_hem is rate limited per agent
	each(t, func(t *testing.T, tr transport, ver string) {
		for _, tc := range []struct {
			name    string
			answer  *sdk.ElicitResult
			status  string
			explain string
		}{
			{"confirm", &sdk.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}}, "COMPLETE", ""},
			{"decline", &sdk.ElicitResult{Action: "accept", Content: map[string]any{"confirm": false, "reason": "not this week"}}, "DECLINED", "not this week"},
			{"refuse", &sdk.ElicitResult{Action: "decline"}, "DECLINED", "declined by the operator in an MCP host"},
		} {
			var asked []string
			cs, _ := f.connect(t, tr, ver, f.issue(t, agent(), hemOperator), func(_ context.Context, r *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
				asked = append(asked, r.Params.Message)
				return tc.answer, nil
			})
			res := callTool(t, cs, "atp_invoke_hem", invokeHEM)
			s := structured(t, res)
			if res.IsError || s["status"] != tc.status || len(asked) != 1 || !strings.Contains(asked[0], "asks an operator to confirm HEM task") {
				t.Fatalf("%s: isError %v, structured %v, text %q, asked %q", tc.name, res.IsError, s, text(res), asked)
			}
			if tc.explain != "" && s["reason"] != tc.explain {
				t.Fatalf("%s: reason %v, want %q", tc.name, s["reason"], tc.explain)
			}
		}
		// No elicitation: the pending result and its task id.
		cs, _ := f.connect(t, tr, ver, f.issue(t, agent(), hemOperator), nil)
		res := callTool(t, cs, "atp_invoke_hem", invokeHEM)
		s := structured(t, res)
		id, _ := s["task_id"].(string)
		if res.IsError || s["status"] != "PENDING" || id == "" || !strings.Contains(text(res), `atp_hem_confirm {"task_id":"`+id+`"}`) ||
			!strings.Contains(text(res), "cannot answer elicitations") && !strings.Contains(text(res), "did not answer the elicitation") {
			t.Fatalf("no elicitation: isError %v, structured %v, text %q", res.IsError, s, text(res))
		}
		if res = callTool(t, cs, "atp_hem_decline", map[string]any{"task_id": id, "reason": "by the host"}); res.IsError || structured(t, res)["status"] != "DECLINED" {
			t.Fatalf("atp_hem_decline by the host: %q", text(res))
		}
		// Not an operator: never asked.
		asked := 0
		cs, _ = f.connect(t, tr, ver, f.issue(t, agent(), hemInvoker), func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			asked++
			return &sdk.ElicitResult{Action: "accept"}, nil
		})
		res = callTool(t, cs, "atp_invoke_hem", invokeHEM)
		if s := structured(t, res); res.IsError || s["status"] != "PENDING" || asked != 0 || !strings.Contains(text(res), "not an operator's") {
			t.Fatalf("not an operator: isError %v, structured %v, text %q, asked %d", res.IsError, s, text(res), asked)
		}
	})
}

// TestHEMTaskThroughToResult: atp_invoke_hem called as a task works until
// an operator decides; the task's result is the .hem-result call the ATP
// service writes into the turn, read through a new bridge.
func TestHEMTaskThroughToResult(t *testing.T) {
	f := startMesh(t)
	n := 0
	eachTransport(t, func(t *testing.T, tr transport) {
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
		task := tb.startTaskOf(t, "atp_invoke_hem", invokeHEM)
		if _, err := woken.NextMsg(time.Minute); err != nil {
			t.Fatalf("no wakeup for the first result: %v", err)
		}
		g := tb.get(t, task.TaskId)
		hemTask, _, _ := strings.Cut(strings.TrimPrefix(g.StatusMessage, "HEM task "), " ")
		if g.Status != mcp.TaskStatusWorking || !strings.HasPrefix(hemTask, "hem_") {
			t.Fatalf("tasks/get while PENDING = %+v", g)
		}
		if _, rerr := tb.rpcErr(t, "tasks/cancel", map[string]any{"taskId": task.TaskId}); rerr == nil || !strings.Contains(rerr.Message, "only an operator ends it") {
			t.Fatalf("tasks/cancel of a HEM task waiting for an operator: %+v", rerr)
		}
		tb.stop()
		second := serveTasks(t, f.m, tr, tok)
		r := second.awaitResult(t, task.TaskId, func() {
			// The operator (this host's mandate is one) declines it.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := second.c.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "atp_hem_decline",
				Arguments: map[string]any{"task_id": hemTask, "reason": "task test"}}})
			if err != nil || res.IsError {
				t.Errorf("atp_hem_decline: %+v, %v", res, err)
			}
		})
		if r.IsError || !strings.Contains(textContent(r.Content), `"status":"DECLINED"`) || !strings.HasSuffix(fmt.Sprint(r.Meta.AdditionalFields["utpmesh/result_tool_call_id"]), ".hem-result") {
			t.Fatalf("tasks/result = %+v", r)
		}
		if g := second.get(t, task.TaskId); g.Status != mcp.TaskStatusCompleted {
			t.Fatalf("tasks/get after the decision = %+v", g)
		}
	})
}
