package mcpbridge

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
	"github.com/utpmesh/utpmesh/services/atlas/utility"
)

// confirmInputID is the id of the confirmation's input request.
const confirmInputID = "confirm"

// confirmSchema is the elicitation form: one boolean, true by default.
var confirmSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"confirm": map[string]any{"type": "boolean", "title": "Run it", "description": "true runs the call, false cancels it", "default": true},
	},
}

// pendingState is the request state of a confirmation round trip: what a
// 2026-07-28 client echoes back with its answer.
type pendingState struct {
	ConfirmationID string `json:"confirmation_id,omitempty"`
	// HEMTaskID is set instead of ConfirmationID for an ATP HEM task
	// waiting for an operator.
	HEMTaskID  string `json:"hem_task_id,omitempty"`
	ToolName   string `json:"tool_name"`
	ToolCallID string `json:"tool_call_id"`
}

// pendingConfirm reports whether a tool result is an ATLAS PENDING_CONFIRM.
func pendingConfirm(result json.RawMessage) (*receipts.PendingResult, bool) {
	var p receipts.PendingResult
	if json.Unmarshal(result, &p) != nil || p.Status != receipts.StatusPendingConfirm || p.ConfirmationID == "" {
		return nil, false
	}
	return &p, true
}

// elicitationParams is the question asked for p.
func elicitationParams(p *receipts.PendingResult) mcp.ElicitationParams {
	msg := fmt.Sprintf("%s waits for your confirmation (%s)", p.ToolName, p.ConfirmationID)
	var would struct {
		Action string `json:"action"`
	}
	if json.Unmarshal(p.Would, &would) == nil && would.Action != "" {
		msg += ": it would " + would.Action
	}
	if p.ExpiresAt != "" {
		msg += "; it expires at " + p.ExpiresAt
	}
	return mcp.ElicitationParams{Message: msg + ". Run it?", RequestedSchema: confirmSchema}
}

// askConfirmation asks the host to confirm a PENDING_CONFIRM: a 2026-07-28
// client that declared elicitation gets an input request (and retries with
// the answer); a 2025-11-25 client gets elicitation/create now. A host
// that cannot be asked gets the pending result with the confirmation id.
func (b *Bridge) askConfirmation(ctx context.Context, ci callInfo, out *agent.Outcome, p *receipts.PendingResult) (*mcp.CallToolResult, error) {
	params := elicitationParams(p)
	if server.IsModernRequest(ctx) {
		info := server.RequestProtocolInfoFromContext(ctx)
		if info.ClientCapabilities == nil || info.ClientCapabilities.Elicitation == nil {
			return pendingResult(out, p, "the host cannot answer elicitations"), nil
		}
		state, _ := json.Marshal(pendingState{ConfirmationID: p.ConfirmationID, ToolName: p.ToolName, ToolCallID: out.Call.ToolCallID})
		return server.NewInputRequestBuilder(string(state)).Elicit(confirmInputID, params).ToolResult(), nil
	}
	ans, err := b.srv.RequestElicitation(ctx, mcp.ElicitationRequest{
		Request: mcp.Request{Method: string(mcp.MethodElicitationCreate)}, Params: params})
	if err != nil {
		b.log.Info("mcp: confirmation not asked", "confirmation_id", p.ConfirmationID, "err", err)
		return pendingResult(out, p, "the host did not answer the elicitation: "+err.Error()), nil
	}
	return b.resolve(ctx, ci, p.ConfirmationID, accepted(ans)), nil
}

// answerConfirmation handles the retry of a 2026-07-28 client carrying the
// answer to a confirmation.
func (b *Bridge) answerConfirmation(ctx context.Context, ci callInfo, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var st pendingState
	if err := json.Unmarshal([]byte(req.Params.RequestState), &st); err != nil || (st.ConfirmationID == "" && st.HEMTaskID == "") {
		return errorResult("requestState is not one this bridge issued (want the JSON state of a confirmation); call the tool again without it"), nil
	}
	ans := server.ElicitationResponse(req.Params.InputResponses, confirmInputID)
	if st.HEMTaskID != "" {
		if ans == nil {
			return errorResult(fmt.Sprintf("no answer to input request %q for HEM task %s: retry with inputResponses.%s, or call %s / %s with {\"task_id\":%q}",
				confirmInputID, st.HEMTaskID, confirmInputID, toolHEMConfirm, toolHEMDecline, st.HEMTaskID)), nil
		}
		return b.resolveHEM(ctx, ci, st.HEMTaskID, ans), nil
	}
	if ans == nil {
		return errorResult(fmt.Sprintf("no answer to input request %q for confirmation %s: retry with inputResponses.%s, or call %s / %s with {\"confirmation_id\":%q}",
			confirmInputID, st.ConfirmationID, confirmInputID, utility.ToolConfirm, utility.ToolCancel, st.ConfirmationID)), nil
	}
	return b.resolve(ctx, ci, st.ConfirmationID, accepted(ans)), nil
}

// accepted reports whether an elicitation answer confirms: accept, with
// confirm absent or true.
func accepted(ans *mcp.ElicitationResult) bool {
	if ans.Action != mcp.ElicitationResponseActionAccept {
		return false
	}
	if m, ok := ans.Content.(map[string]any); ok {
		if v, ok := m["confirm"].(bool); ok {
			return v
		}
	}
	return true
}

// resolve runs ATLAS_CONFIRM (confirm) or ATLAS_CANCEL as a UTP call of the
// session's turn and maps its result.
func (b *Bridge) resolve(ctx context.Context, ci callInfo, confirmationID string, confirm bool) *mcp.CallToolResult {
	tool := utility.ToolCancel
	if confirm {
		tool = utility.ToolConfirm
	}
	args, _ := json.Marshal(map[string]string{"confirmation_id": confirmationID})
	out, res := b.call(ctx, ci, tool, args)
	if res != nil {
		return res
	}
	return resultOf(out)
}

// pendingResult is the answer for a host that cannot confirm: the pending
// result as it is, and the text says how to confirm or cancel it.
func pendingResult(out *agent.Outcome, p *receipts.PendingResult, why string) *mcp.CallToolResult {
	r := resultOf(out)
	r.Content = []mcp.Content{mcp.NewTextContent(fmt.Sprintf(
		"PENDING_CONFIRM: %s did not run yet (%s). Confirm it by calling %s with {\"confirmation_id\":%q}, or drop it with %s.",
		p.ToolName, why, utility.ToolConfirm, p.ConfirmationID, utility.ToolCancel))}
	return r
}
