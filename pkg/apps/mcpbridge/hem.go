package mcpbridge

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// hemPending is the first result of an atp_invoke_hem that waits for an
// operator (docs/protocol.md §18).
type hemPending struct {
	TaskID           string `json:"task_id"`
	Status           string `json:"status"`
	HEMID            string `json:"hem_id"`
	ProtocolDeadline string `json:"protocol_deadline"`
	ResultToolCallID string `json:"result_tool_call_id"`
}

// pendingHEM reports whether out is an atp_invoke_hem waiting for an
// operator.
func pendingHEM(out *agent.Outcome) (*hemPending, bool) {
	if out.Call.ToolName != toolInvokeHEM || out.Result.Status != card.StatusSuccess {
		return nil, false
	}
	var p hemPending
	if json.Unmarshal(out.Result.Result, &p) != nil || p.Status != hemStatusPending || p.TaskID == "" {
		return nil, false
	}
	return &p, true
}

// hemSchema is the operator's form: confirm (default true) and a reason,
// which a decline needs.
var hemSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"confirm": map[string]any{"type": "boolean", "title": "Run the HEM", "description": "true confirms the task (the HEM runs), false declines it", "default": true},
		"reason":  map[string]any{"type": "string", "title": "Reason", "description": "why you decline (the agent reads it)"},
	},
}

// hemQuestion is the elicitation that asks the operator.
func hemQuestion(p *hemPending) mcp.ElicitationParams {
	msg := fmt.Sprintf("atp_invoke_hem asks an operator to confirm HEM task %s (%s)", p.TaskID, p.HEMID)
	if p.ProtocolDeadline != "" {
		msg += "; without a decision it is decided at " + p.ProtocolDeadline
	}
	return mcp.ElicitationParams{Message: msg + ". Run the HEM? (false declines it: give a reason)", RequestedSchema: hemSchema}
}

// operator reports whether ci's mandate may confirm HEM tasks: the
// residual of mandate_query permits atp_hem_list and atp_hem_confirm (a
// mesh without the gate permits everything).
func (b *Bridge) operator(ctx context.Context) (bool, error) {
	r, err := b.residual(ctx)
	if err != nil || r == nil {
		return err == nil, err
	}
	var list, confirm bool
	for _, p := range r.Permitted {
		list = list || p.ToolName == toolHEMList
		confirm = confirm || p.ToolName == toolHEMConfirm
	}
	return list && confirm, nil
}

// askOperator handles an atp_invoke_hem that waits for an operator. When
// the host's mandate is an operator's, the host is asked (an input
// request for 2026-07-28 clients that declared elicitation,
// elicitation/create for older ones) and its answer confirms or declines
// the task with atp_hem_confirm / atp_hem_decline; otherwise, or when the
// host cannot be asked, the answer is the PENDING result with the task id.
func (b *Bridge) askOperator(ctx context.Context, ci callInfo, out *agent.Outcome, p *hemPending) (*mcp.CallToolResult, error) {
	op, err := b.operator(ctx)
	if err != nil {
		b.log.Warn("mcp: cannot tell whether the host is an operator; HEM task left pending", "task_id", p.TaskID, "err", err)
	}
	if !op {
		return hemPendingResult(out, p, "this host's mandate is not an operator's"), nil
	}
	params := hemQuestion(p)
	if server.IsModernRequest(ctx) {
		info := server.RequestProtocolInfoFromContext(ctx)
		if info.ClientCapabilities == nil || info.ClientCapabilities.Elicitation == nil {
			return hemPendingResult(out, p, "the host cannot answer elicitations"), nil
		}
		state, _ := json.Marshal(pendingState{HEMTaskID: p.TaskID, ToolName: toolInvokeHEM, ToolCallID: out.Call.ToolCallID})
		return server.NewInputRequestBuilder(string(state)).Elicit(confirmInputID, params).ToolResult(), nil
	}
	ans, err := b.srv.RequestElicitation(ctx, mcp.ElicitationRequest{
		Request: mcp.Request{Method: string(mcp.MethodElicitationCreate)}, Params: params})
	if err != nil {
		b.log.Info("mcp: HEM confirmation not asked", "task_id", p.TaskID, "err", err)
		return hemPendingResult(out, p, "the host did not answer the elicitation: "+err.Error()), nil
	}
	return b.resolveHEM(ctx, ci, p.TaskID, ans), nil
}

// resolveHEM confirms (atp_hem_list for the task's
// human_confirmation_token, then atp_hem_confirm) or declines
// (atp_hem_decline with the answer's reason) the HEM task, each a UTP
// call of the session's turn, and maps the last call's result.
func (b *Bridge) resolveHEM(ctx context.Context, ci callInfo, taskID string, ans *mcp.ElicitationResult) *mcp.CallToolResult {
	if !accepted(ans) {
		reason := "declined by the operator in an MCP host"
		if m, ok := ans.Content.(map[string]any); ok {
			if r, ok := m["reason"].(string); ok && r != "" {
				reason = r
			}
		}
		args, _ := json.Marshal(map[string]string{"task_id": taskID, "reason": reason})
		return b.callResult(ctx, ci, toolHEMDecline, args)
	}
	args, _ := json.Marshal(map[string]string{"status": hemStatusPending})
	out, res := b.call(ctx, ci, toolHEMList, args)
	if res != nil {
		return res
	}
	if out.Result.Status != card.StatusSuccess {
		return resultOf(out)
	}
	var list struct {
		Tasks []struct {
			TaskID string `json:"task_id"`
			Token  string `json:"human_confirmation_token"`
		} `json:"tasks"`
	}
	_ = json.Unmarshal(out.Result.Result, &list)
	confirm := map[string]string{"task_id": taskID, "note": "confirmed by the operator in an MCP host (turn " + ci.turn + ")"}
	for _, t := range list.Tasks {
		if t.TaskID == taskID && t.Token != "" {
			confirm["human_confirmation_token"] = t.Token
		}
	}
	args, _ = json.Marshal(confirm)
	return b.callResult(ctx, ci, toolHEMConfirm, args)
}

// callResult makes one UTP call and maps its result.
func (b *Bridge) callResult(ctx context.Context, ci callInfo, tool string, args json.RawMessage) *mcp.CallToolResult {
	out, res := b.call(ctx, ci, tool, args)
	if res != nil {
		return res
	}
	return resultOf(out)
}

// hemPendingResult is the PENDING result as it is, with a text saying who
// decides and how.
func hemPendingResult(out *agent.Outcome, p *hemPending, why string) *mcp.CallToolResult {
	r := resultOf(out)
	r.Content = []mcp.Content{mcp.NewTextContent(fmt.Sprintf(
		"PENDING: HEM task %s (%s) waits for an operator (%s). An operator confirms it with %s {\"task_id\":%q} (utpmesh hem confirm %s) or declines it with %s {\"task_id\":%q,\"reason\":…}; the outcome arrives as call %s of turn %s.",
		p.TaskID, p.HEMID, why, toolHEMConfirm, p.TaskID, p.TaskID, toolHEMDecline, p.TaskID, p.ResultToolCallID, out.Call.AgentTurnID))}
	return r
}
