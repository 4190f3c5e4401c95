package mcpbridge

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/confirm"
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
	// HandoffTaskID is set instead of ConfirmationID for a call waiting
	// for an operator (a Handoff's task).
	HandoffTaskID string `json:"handoff_task_id,omitempty"`
	ToolName      string `json:"tool_name"`
	ToolCallID    string `json:"tool_call_id"`
	// ConfirmTool and CancelTool are the pending result's resolver tools
	// (confirm.Pending), kept so the retry runs the right one.
	ConfirmTool string `json:"confirm_tool,omitempty"`
	CancelTool  string `json:"cancel_tool,omitempty"`
}

// decodeState reads a 2026-07-28 retry's request state. It accepts
// "hem_task_id", the key of HandoffTaskID before the bridge knew handoffs
// generically (ATP's HEM task was the only one), as an alias of
// "handoff_task_id": a client retrying across a bridge upgrade echoes the
// state the old bridge issued.
func decodeState(raw string) (pendingState, error) {
	var st struct {
		pendingState
		LegacyHandoffTaskID string `json:"hem_task_id,omitempty"`
	}
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return pendingState{}, err
	}
	if st.HandoffTaskID == "" {
		st.HandoffTaskID = st.LegacyHandoffTaskID
	}
	return st.pendingState, nil
}

// pending is the confirmation a 2026-07-28 retry's state names.
func (st pendingState) pending() *confirm.Pending {
	return &confirm.Pending{Status: confirm.StatusPending, ConfirmationID: st.ConfirmationID, ToolName: st.ToolName,
		ConfirmTool: st.ConfirmTool, CancelTool: st.CancelTool}
}

// pendingConfirm reports whether a tool result waits for a human's
// confirmation (the mesh's convention, docs/protocol.md §19).
func pendingConfirm(result json.RawMessage) (*confirm.Pending, bool) {
	return confirm.Parse(result)
}

// elicitationParams is the question asked for p.
func elicitationParams(p *confirm.Pending) mcp.ElicitationParams {
	msg := fmt.Sprintf("%s waits for your confirmation (%s)", p.ToolName, p.ConfirmationID)
	if action := p.Summary(); action != "" {
		msg += ": it would " + action
	}
	if p.ExpiresAt != "" {
		msg += "; it expires at " + p.ExpiresAt
	}
	return mcp.ElicitationParams{Message: msg + ". Run it?", RequestedSchema: confirmSchema}
}

// askConfirmation asks the host to confirm a pending result: a 2026-07-28
// client that declared elicitation gets an input request (and retries with
// the answer); a 2025-11-25 client that declared it at initialize gets
// elicitation/create now. A host that did not declare elicitation is never
// sent a request: it gets the pending result with the confirmation id.
func (b *Bridge) askConfirmation(ctx context.Context, ci callInfo, out *agent.Outcome, p *confirm.Pending) (*mcp.CallToolResult, error) {
	params := elicitationParams(p)
	if !declaredElicitation(ctx) {
		return pendingResult(out, p, noElicitation), nil
	}
	if server.IsModernRequest(ctx) {
		state, _ := json.Marshal(pendingState{ConfirmationID: p.ConfirmationID, ToolName: p.ToolName, ToolCallID: out.Call.ToolCallID,
			ConfirmTool: p.ConfirmTool, CancelTool: p.CancelTool})
		return server.NewInputRequestBuilder(string(state)).Elicit(confirmInputID, params).ToolResult(), nil
	}
	ans, err := b.srv.RequestElicitation(ctx, mcp.ElicitationRequest{
		Request: mcp.Request{Method: string(mcp.MethodElicitationCreate)}, Params: params})
	if err != nil {
		b.log.Info("mcp: confirmation not asked", "confirmation_id", p.ConfirmationID, "err", err)
		return pendingResult(out, p, "the host did not answer the elicitation: "+err.Error()), nil
	}
	return b.resolveAnswer(ctx, ci, p, ans), nil
}

// noElicitation is why a host is not asked: it did not declare the
// elicitation capability.
const noElicitation = "the host cannot answer elicitations: it did not declare the elicitation capability, so it was not asked"

// declaredElicitation reports whether the client of ctx's request declared
// the elicitation capability: in the request's _meta (2026-07-28) or at
// initialize (older versions; the session keeps it).
func declaredElicitation(ctx context.Context) bool {
	if server.IsModernRequest(ctx) {
		info := server.RequestProtocolInfoFromContext(ctx)
		return info.ClientCapabilities != nil && info.ClientCapabilities.Elicitation != nil
	}
	s, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo)
	return ok && s.GetClientCapabilities().Elicitation != nil
}

// answerConfirmation handles the retry of a 2026-07-28 client carrying the
// answer to a confirmation.
func (b *Bridge) answerConfirmation(ctx context.Context, ci callInfo, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	st, err := decodeState(req.Params.RequestState)
	if err != nil || (st.ConfirmationID == "" && st.HandoffTaskID == "") {
		return errorResult("requestState is not one this bridge issued (want the JSON state of a confirmation); call the tool again without it"), nil
	}
	ans := server.ElicitationResponse(req.Params.InputResponses, confirmInputID)
	if st.HandoffTaskID != "" {
		h, ok := b.handoffOf(st.ToolName)
		if !ok {
			return errorResult(fmt.Sprintf("requestState names task %s of %s, which this bridge does not know how to decide; call the tool again without it", st.HandoffTaskID, st.ToolName)), nil
		}
		if ans == nil {
			return errorResult(fmt.Sprintf("no answer to input request %q for task %s: retry with inputResponses.%s, or decide it by hand: %s",
				confirmInputID, st.HandoffTaskID, confirmInputID, h.Hint(st.HandoffTaskID))), nil
		}
		return b.resolveHandoff(ctx, ci, h, st.HandoffTaskID, ans), nil
	}
	p := st.pending()
	if ans == nil {
		confirmTool, cancelTool := p.Resolvers()
		return errorResult(fmt.Sprintf("no answer to input request %q for confirmation %s: retry with inputResponses.%s, or call %s / %s with {\"confirmation_id\":%q}",
			confirmInputID, st.ConfirmationID, confirmInputID, confirmTool, cancelTool, st.ConfirmationID)), nil
	}
	return b.resolveAnswer(ctx, ci, p, ans), nil
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

// resolveAnswer resolves p by the host's answer ans. When the host
// declined (decline, cancel, or confirm: false), the result's text says so
// first: the cancel tool's result alone (e.g. SKIPPED) does not tell a
// model that a human refused.
func (b *Bridge) resolveAnswer(ctx context.Context, ci callInfo, p *confirm.Pending, ans *mcp.ElicitationResult) *mcp.CallToolResult {
	yes := accepted(ans)
	r := b.resolve(ctx, ci, p, yes)
	if yes {
		return r
	}
	how := string(ans.Action)
	if ans.Action == mcp.ElicitationResponseActionAccept {
		how = "confirm: false"
	}
	_, cancelTool := p.Resolvers()
	note := fmt.Sprintf("Declined: the host answered %q to confirmation %s, so %s did not run; %s dropped it.",
		how, p.ConfirmationID, p.ToolName, cancelTool)
	r.Content = append([]mcp.Content{mcp.NewTextContent(note)}, r.Content...)
	return r
}

// resolve runs p's confirm tool (yes) or cancel tool (ATLAS_CONFIRM and
// ATLAS_CANCEL by default) as a UTP call of the session's turn and maps its
// result.
func (b *Bridge) resolve(ctx context.Context, ci callInfo, p *confirm.Pending, yes bool) *mcp.CallToolResult {
	args, err := confirm.Args(p.ConfirmationID)
	if err != nil {
		return errorResult(err.Error())
	}
	out, res := b.call(ctx, ci, p.Resolver(yes), args)
	if res != nil {
		return res
	}
	return resultOf(out)
}

// pendingResult is the answer for a host that cannot confirm: the pending
// result as it is, and the text says how to confirm or cancel it.
func pendingResult(out *agent.Outcome, p *confirm.Pending, why string) *mcp.CallToolResult {
	confirmTool, cancelTool := p.Resolvers()
	r := resultOf(out)
	r.Content = []mcp.Content{mcp.NewTextContent(fmt.Sprintf(
		"PENDING_CONFIRM: %s did not run yet (%s). Confirm it by calling %s with {\"confirmation_id\":%q}, or drop it with %s.",
		p.ToolName, why, confirmTool, p.ConfirmationID, cancelTool))}
	return r
}
