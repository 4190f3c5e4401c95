package mcpbridge_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge/mcptest"
	"github.com/utpmesh/utpmesh/subjects"
)

// Mandate policies of the ticket catalogue: an agent that may open
// tickets, and an operator who may also approve and reject them (the
// Handoff's Operators).
const (
	ticketInvoker  = `permit(principal, action == Action::"ticket", resource);`
	ticketOperator = ticketInvoker + "\npermit(principal, action in [Action::\"ticket_approve\", Action::\"ticket_reject\"], resource);"
)

var openTicket = map[string]any{"subject": "a new desk"}

// TestHandoffAsElicitation: a call whose result waits for an operator (a
// registered Handoff's, here the ticket catalogue's) is asked as an
// elicitation when the host's mandate is an operator's; the answer is
// carried out by the Handoff: confirm approves the ticket (with the
// bridge's note), "false" with a reason or a declined elicitation rejects
// it with that reason or the bridge's; a host without elicitation, or whose
// mandate is not an operator's, gets the pending result, the ticket id and
// the Handoff's hint.
func TestHandoffAsElicitation(t *testing.T) {
	f := startMesh(t)
	n := 0
	agentID := func() string { n++; return fmt.Sprintf("host-%d", n) }
	mcptest.Each(t, func(t *testing.T, tr mcptest.Transport, ver string) {
		for _, tc := range []struct {
			name   string
			answer *sdk.ElicitResult
			status string
			reason string
		}{
			{"approve", mcptest.Confirm(true, ""), ticketApproved, ""},
			{"reject", mcptest.Confirm(false, "not this week"), ticketRejected, "not this week"},
			{"refuse", &sdk.ElicitResult{Action: "decline"}, ticketRejected, "declined by the operator in an MCP host"},
		} {
			var asked []string
			cs, _ := f.connect(t, tr, ver, f.g.Issue(t, agentID(), ticketOperator), mcptest.Answer(tc.answer, &asked))
			res := mcptest.CallTool(t, cs, toolTicket, openTicket)
			s := mcptest.Structured(t, res)
			id, _ := s["ticket_id"].(string)
			if res.IsError || s["status"] != tc.status || len(asked) != 1 || asked[0] != fmt.Sprintf("ticket %s waits for an operator. Approve it? (false rejects it: give a reason)", id) {
				t.Fatalf("%s: isError %v, structured %v, text %q, asked %q", tc.name, res.IsError, s, mcptest.Text(res), asked)
			}
			if tc.reason != "" && s["reason"] != tc.reason {
				t.Fatalf("%s: reason %v, want %q", tc.name, s["reason"], tc.reason)
			}
			if note, _ := s["note"].(string); tc.status == ticketApproved && !strings.HasPrefix(note, "confirmed by the operator in an MCP host (turn mcp-") {
				t.Fatalf("%s: note %q, want the bridge's", tc.name, note)
			}
		}
		// No elicitation: the pending result, its ticket id and the hint.
		cs, _ := f.connect(t, tr, ver, f.g.Issue(t, agentID(), ticketOperator), nil)
		res := mcptest.CallTool(t, cs, toolTicket, openTicket)
		s := mcptest.Structured(t, res)
		id, _ := s["ticket_id"].(string)
		if res.IsError || s["status"] != ticketWaiting || id == "" ||
			!strings.Contains(mcptest.Text(res), "PENDING: ticket "+id+" waits for an operator") ||
			!strings.Contains(mcptest.Text(res), toolTicketApprove+` {"ticket_id":"`+id+`"}`) ||
			!strings.Contains(mcptest.Text(res), "did not declare the elicitation capability, so it was not asked") {
			t.Fatalf("no elicitation: isError %v, structured %v, text %q", res.IsError, s, mcptest.Text(res))
		}
		if res = mcptest.CallTool(t, cs, toolTicketReject, map[string]any{"ticket_id": id, "reason": "by the host"}); res.IsError || mcptest.Structured(t, res)["status"] != ticketRejected {
			t.Fatalf("%s by the host: %q", toolTicketReject, mcptest.Text(res))
		}
		// Not an operator: never asked.
		asked := 0
		cs, _ = f.connect(t, tr, ver, f.g.Issue(t, agentID(), ticketInvoker), func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			asked++
			return &sdk.ElicitResult{Action: "accept"}, nil
		})
		res = mcptest.CallTool(t, cs, toolTicket, openTicket)
		if s := mcptest.Structured(t, res); res.IsError || s["status"] != ticketWaiting || asked != 0 || !strings.Contains(mcptest.Text(res), "not an operator's") {
			t.Fatalf("not an operator: isError %v, structured %v, text %q, asked %d", res.IsError, s, mcptest.Text(res), asked)
		}
	})
}

// TestHandoffTaskThroughToResult: a tool a Handoff owns is offered as a
// task; called as one, it stays working after its waiting result (the
// status message names the Handoff's task), tasks/cancel is refused (only
// an operator ends it), and the task's result is the later outcome call
// the catalogue writes into the turn, read through a new bridge.
func TestHandoffTaskThroughToResult(t *testing.T) {
	f := startMesh(t)
	n := 0
	mcptest.EachTransport(t, func(t *testing.T, tr mcptest.Transport) {
		n++
		agentID := fmt.Sprintf("ticket-agent-%d", n)
		tok := f.g.Issue(t, agentID, ticketOperator)
		tb := serveTasks(t, f.m, tr, tok)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		lr, err := tb.C.ListTools(ctx, mcp.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range lr.Tools {
			if async := tl.Execution != nil && tl.Execution.TaskSupport == mcp.TaskSupportOptional; async != (tl.Name == toolTicket) {
				t.Fatalf("tools/list: %s has execution %+v; want taskSupport optional for %s (a Handoff owns it) only", tl.Name, tl.Execution, toolTicket)
			}
		}
		// The first result (WAITING) wakes the agent: wait for that.
		wakeup, err := subjects.AgentWakeup(subjects.DefaultVersion, "demo", agent.DefaultChannel, agentID)
		if err != nil {
			t.Fatal(err)
		}
		woken, err := f.m.Conn().SubscribeSync(wakeup.String())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = woken.Unsubscribe() }()
		task := tb.StartTask(t, toolTicket, openTicket)
		if _, err := woken.NextMsg(time.Minute); err != nil {
			t.Fatalf("no wakeup for the first result: %v", err)
		}
		g := tb.Get(t, task.TaskId)
		ticketID, _, _ := strings.Cut(strings.TrimPrefix(g.StatusMessage, "ticket "), " ")
		if g.Status != mcp.TaskStatusWorking || !strings.HasPrefix(ticketID, "tk_") || !strings.Contains(g.StatusMessage, "waits for an operator: an operator approves it") {
			t.Fatalf("tasks/get while waiting = %+v", g)
		}
		if _, rerr := tb.RPCErr(t, "tasks/cancel", map[string]any{"taskId": task.TaskId}); rerr == nil || !strings.Contains(rerr.Message, "only an operator ends it") {
			t.Fatalf("tasks/cancel of a task waiting for an operator: %+v", rerr)
		}
		tb.Stop()
		second := serveTasks(t, f.m, tr, tok)
		r := second.AwaitResult(t, task.TaskId, func() {
			// The operator (this host's mandate is one) rejects it.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := second.C.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: toolTicketReject,
				Arguments: map[string]any{"ticket_id": ticketID, "reason": "task test"}}})
			if err != nil || res.IsError {
				t.Errorf("%s: %+v, %v", toolTicketReject, res, err)
			}
		})
		_, callID, err := mcpbridge.ParseTaskID(task.TaskId)
		if err != nil {
			t.Fatal(err)
		}
		if r.IsError || !strings.Contains(mcptest.TextContent(r.Content), `"status":"REJECTED"`) ||
			r.Meta.AdditionalFields[mcpbridge.MetaToolCallID] != callID || r.Meta.AdditionalFields["utpmesh/result_tool_call_id"] != callID+outcomeSuffix {
			t.Fatalf("tasks/result = %+v", r)
		}
		if g := second.Get(t, task.TaskId); g.Status != mcp.TaskStatusCompleted {
			t.Fatalf("tasks/get after the decision = %+v", g)
		}
	})
}

// TestHandoffRetryState: a 2026-07-28 client's retry carries the answer
// to a handoff's input request with the request state the bridge issued;
// the state's task key is handoff_task_id, and hem_task_id (the key before
// handoffs were generic) is read the same, so a client retrying across a
// bridge upgrade still gets its answer carried out.
func TestHandoffRetryState(t *testing.T) {
	f := startMesh(t)
	for _, key := range []string{"handoff_task_id", "hem_task_id"} {
		t.Run(key, func(t *testing.T) {
			cs, _ := f.connect(t, mcptest.Stdio, "2026-07-28", f.g.Issue(t, "retry-"+key, ticketOperator), nil)
			s := mcptest.Structured(t, mcptest.CallTool(t, cs, toolTicket, openTicket))
			id, _ := s["ticket_id"].(string)
			if s["status"] != ticketWaiting || id == "" {
				t.Fatalf("open a ticket: %v", s)
			}
			state := fmt.Sprintf(`{%q:%q,"tool_name":%q,"tool_call_id":"c-1"}`, key, id, toolTicket)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: toolTicket, Arguments: openTicket, RequestState: state,
				InputResponses: sdk.InputResponseMap{"confirm": mcptest.Confirm(true, "")}})
			if err != nil {
				t.Fatal(err)
			}
			if s := mcptest.Structured(t, res); res.IsError || s["status"] != ticketApproved || s["ticket_id"] != id {
				t.Fatalf("retry with %s: isError %v, structured %v, text %q", state, res.IsError, s, mcptest.Text(res))
			}
		})
	}
}
