package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// Handoff is a catalogue's renderer for a tool whose call hands its
// outcome to an operator: the call's first result says the work waits for
// an operator, and the outcome arrives later as another call of the turn
// (ATP's HEM escalation is one; services/atp/atpmcp). The bridge knows no
// catalogue's tools: it asks the registered handoffs (RegisterHandoff).
// Results that wait for the caller's own confirmation use the generic
// convention instead (package confirm).
type Handoff interface {
	// Owns reports whether tool's calls may hand off; such a tool is
	// served as an MCP task whatever its registry options.
	Owns(tool string) bool
	// Pending returns the operator task a successful result of an owned
	// tool waits on, or false when the result is final.
	Pending(result json.RawMessage) (*HandoffTask, bool)
	// Resolve carries out an operator's answer to task taskID: yes
	// confirms it; no declines it, with reason. note is kept with a
	// confirmation. Each call goes through call (a UTP call of the
	// session's turn); Resolve returns the outcome of the last one.
	Resolve(ctx context.Context, call CallFunc, taskID string, yes bool, reason, note string) (*agent.Outcome, error)
	// Hint says how an operator decides task taskID by hand (tools and
	// commands), for texts where the host cannot be asked.
	Hint(taskID string) string
}

// CallFunc makes one UTP call for a Handoff. An error means no outcome
// (the bridge answers with its own error result).
type CallFunc func(ctx context.Context, tool string, args json.RawMessage) (*agent.Outcome, error)

// HandoffTask is an operator task a pending result waits on.
type HandoffTask struct {
	// ID is the catalogue's task id (what Resolve and Hint take).
	ID string
	// Label names the task in texts, e.g. "HEM task hem_1 (HEM-01)".
	Label string
	// Question is the elicitation message asking the operator.
	Question string
	// ResultToolCallID is the call of the turn whose result is the
	// task's outcome.
	ResultToolCallID string
	// Operators are the tools a host's mandate must permit for the host
	// to be asked (mandate_query); else the pending result is answered.
	// Empty: the host is asked whatever its mandate (a handoff that
	// decides as an operator of its own).
	Operators []string
}

var (
	handoffMu sync.RWMutex
	handoffs  []Handoff
)

// RegisterHandoff adds a catalogue's handoff renderer; the command line
// registers those of the catalogues it selects.
func RegisterHandoff(h Handoff) {
	handoffMu.Lock()
	defer handoffMu.Unlock()
	handoffs = append(handoffs, h)
}

// handoffOf returns the handoff that owns tool: the bridge's own
// (Config.Handoffs) first, then the registered ones.
func (b *Bridge) handoffOf(tool string) (Handoff, bool) {
	if i := slices.IndexFunc(b.cfg.Handoffs, func(h Handoff) bool { return h.Owns(tool) }); i >= 0 {
		return b.cfg.Handoffs[i], true
	}
	handoffMu.RLock()
	defer handoffMu.RUnlock()
	i := slices.IndexFunc(handoffs, func(h Handoff) bool { return h.Owns(tool) })
	if i < 0 {
		return nil, false
	}
	return handoffs[i], true
}

// pendingHandoff reports whether out waits for an operator.
func (b *Bridge) pendingHandoff(tool string, status card.Status, result json.RawMessage) (Handoff, *HandoffTask, bool) {
	h, ok := b.handoffOf(tool)
	if !ok || status != card.StatusSuccess {
		return nil, nil, false
	}
	t, ok := h.Pending(result)
	if !ok || t.ID == "" {
		return nil, nil, false
	}
	return h, t, true
}

// handoffSchema is the operator's form: confirm (default true) and a
// reason, which a decline needs.
var handoffSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"confirm": map[string]any{"type": "boolean", "title": "Confirm", "description": "true confirms the task, false declines it", "default": true},
		"reason":  map[string]any{"type": "string", "title": "Reason", "description": "why you decline (the agent reads it)"},
	},
}

// operator reports whether the session's mandate may decide t: the
// residual of mandate_query permits every tool of t.Operators (a mesh
// without the gate permits everything).
func (b *Bridge) operator(ctx context.Context, t *HandoffTask) (bool, error) {
	if len(t.Operators) == 0 {
		return true, nil
	}
	r, err := b.residual(ctx)
	if err != nil || r == nil {
		return err == nil, err
	}
	for _, tool := range t.Operators {
		if !slices.ContainsFunc(r.Permitted, func(p authz.PermittedTool) bool { return p.ToolName == tool }) {
			return false, nil
		}
	}
	return true, nil
}

// askOperator handles a call that waits for an operator. When the host's
// mandate is an operator's, the host is asked (an input request for
// 2026-07-28 clients that declared elicitation, elicitation/create for
// older ones) and its answer resolves the task (Handoff.Resolve);
// otherwise, or when the host cannot be asked, the answer is the pending
// result with the task id.
func (b *Bridge) askOperator(ctx context.Context, ci callInfo, out *agent.Outcome, h Handoff, t *HandoffTask) (*mcp.CallToolResult, error) {
	op, err := b.operator(ctx, t)
	if err != nil {
		b.log.Warn("mcp: cannot tell whether the host is an operator; task left pending", "task_id", t.ID, "err", err)
	}
	if !op {
		return handoffResult(out, h, t, "this host's mandate is not an operator's"), nil
	}
	params := mcp.ElicitationParams{Message: t.Question, RequestedSchema: handoffSchema}
	if !declaredElicitation(ctx) {
		return handoffResult(out, h, t, noElicitation), nil
	}
	if server.IsModernRequest(ctx) {
		state, _ := json.Marshal(pendingState{HandoffTaskID: t.ID, ToolName: out.Call.ToolName, ToolCallID: out.Call.ToolCallID})
		return server.NewInputRequestBuilder(string(state)).Elicit(confirmInputID, params).ToolResult(), nil
	}
	ans, err := b.srv.RequestElicitation(ctx, mcp.ElicitationRequest{
		Request: mcp.Request{Method: string(mcp.MethodElicitationCreate)}, Params: params})
	if err != nil {
		b.log.Info("mcp: operator not asked", "task_id", t.ID, "err", err)
		return handoffResult(out, h, t, "the host did not answer the elicitation: "+err.Error()), nil
	}
	return b.resolveHandoff(ctx, ci, h, t.ID, ans), nil
}

// errCallAnswered: a Handoff's call ended in the bridge's own error result.
var errCallAnswered = errors.New("mcp: call answered by the bridge")

// resolveHandoff resolves task taskID with the operator's answer ans, and
// maps the outcome of the handoff's last call.
func (b *Bridge) resolveHandoff(ctx context.Context, ci callInfo, h Handoff, taskID string, ans *mcp.ElicitationResult) *mcp.CallToolResult {
	reason := "declined by the operator in an MCP host"
	yes := accepted(ans)
	if !yes {
		if m, ok := ans.Content.(map[string]any); ok {
			if r, ok := m["reason"].(string); ok && r != "" {
				reason = r
			}
		}
	}
	var answered *mcp.CallToolResult
	call := func(ctx context.Context, tool string, args json.RawMessage) (*agent.Outcome, error) {
		out, res := b.call(ctx, ci, tool, args)
		if res != nil {
			answered = res
			return nil, errCallAnswered
		}
		return out, nil
	}
	out, err := h.Resolve(ctx, call, taskID, yes, reason, "confirmed by the operator in an MCP host (turn "+ci.turn+")")
	switch {
	case answered != nil:
		return answered
	case err != nil:
		return errorResult(err.Error())
	}
	return resultOf(out)
}

// handoffResult is the pending result as it is, with a text saying who
// decides and how.
func handoffResult(out *agent.Outcome, h Handoff, t *HandoffTask, why string) *mcp.CallToolResult {
	r := resultOf(out)
	r.Content = []mcp.Content{mcp.NewTextContent(fmt.Sprintf(
		"PENDING: %s waits for an operator (%s). %s; the outcome arrives as call %s of turn %s.",
		t.Label, why, h.Hint(t.ID), t.ResultToolCallID, out.Call.AgentTurnID))}
	return r
}
