package mcpbridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// Keys of the _meta the bridge puts on every tools/call result.
const (
	MetaToolCallID   = "utpmesh/tool_call_id"
	MetaAgentTurnID  = "utpmesh/agent_turn_id"
	MetaResultCardID = "utpmesh/tool_result_card_id"
	MetaStatus       = "utpmesh/status"
)

// handleCall is the tools/call handler of every mesh tool: one UTP call,
// or — on the retry of a confirmation — the resolver call (the pending
// result's confirm or cancel tool, or a Handoff's) the answer asks for.
func (b *Bridge) handleCall(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ci, err := b.info(ctx, req.Header.Get(requestIDHeader))
	if err != nil {
		return nil, err
	}
	if req.Params.RequestState != "" {
		return b.answerConfirmation(ctx, ci, req)
	}
	args, err := argumentsOf(req)
	if err != nil {
		return errorResult(err.Error()), nil
	}
	out, res := b.call(ctx, ci, req.Params.Name, args)
	if res != nil {
		return res, nil
	}
	if p, ok := pendingConfirm(out.Result.Result); ok {
		return b.askConfirmation(ctx, ci, out, p)
	}
	if h, t, ok := b.pendingHandoff(out.Call.ToolName, out.Result.Status, out.Result.Result); ok {
		return b.askOperator(ctx, ci, out, h, t)
	}
	return resultOf(out), nil
}

// argumentsOf returns the call's arguments as a JSON object.
func argumentsOf(req mcp.CallToolRequest) (json.RawMessage, error) {
	raw := req.Params.RawArguments
	if len(bytes.TrimSpace(raw)) == 0 {
		if req.Params.Arguments == nil {
			return json.RawMessage(`{}`), nil
		}
		var err error
		if raw, err = json.Marshal(req.Params.Arguments); err != nil {
			return nil, fmt.Errorf("arguments of %s: %v", req.Params.Name, err)
		}
	}
	raw = bytes.TrimSpace(raw)
	if string(raw) == "null" {
		return json.RawMessage(`{}`), nil
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, fmt.Errorf("the arguments of %s must be a JSON object, e.g. {\"x\": 1}; got %.60s", req.Params.Name, raw)
	}
	return raw, nil
}

// call makes one UTP call as ci. It returns the outcome, or (when there is
// no result to map) the MCP result to answer with.
func (b *Bridge) call(ctx context.Context, ci callInfo, tool string, args json.RawMessage) (*agent.Outcome, *mcp.CallToolResult) {
	c, err := b.client(ci.id.AgentID)
	if err != nil {
		return nil, errorResult(fmt.Sprintf("agent %s: %v", ci.id.AgentID, err))
	}
	cctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout)
	defer cancel()
	out, err := c.Call(cctx, agent.CallRequest{ToolName: tool, Arguments: args, AgentTurnID: ci.turn,
		Mandate: ci.id.Mandate, Metadata: map[string]json.RawMessage{MetadataKey: ci.metadata}})
	var pe *agent.PendingError
	switch {
	case errors.As(err, &pe):
		r := errorResult(fmt.Sprintf("no result yet: tool_call_id %s of turn %s is still running and goes on; see it with 'utpmesh turns show %s --project %s'",
			pe.Pending.ToolCallID, pe.Pending.AgentTurnID, pe.Pending.AgentTurnID, b.cfg.Project))
		r.Meta = mcp.NewMetaFromMap(map[string]any{MetaToolCallID: pe.Pending.ToolCallID, MetaAgentTurnID: pe.Pending.AgentTurnID, MetaStatus: "pending"})
		return nil, r
	case out == nil && errors.Is(err, agent.ErrUnknownTool):
		return nil, errorResult(fmt.Sprintf("%v (tools/list shows the tools)", err))
	case out == nil:
		return nil, errorResult(fmt.Sprintf("the call of %s failed before it reached a tool: %v", tool, err))
	}
	if err != nil { // ErrNotAcked: the outcome is valid
		b.log.Warn("mcp: result read but not acknowledged", "tool", tool, "err", err)
	}
	return out, nil
}

// errorResult is an isError result whose text is msg.
func errorResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(msg)}, IsError: true}
}

// meta is the _meta of a call's MCP result: where it is in the mesh.
func meta(out *agent.Outcome) *mcp.Meta {
	return mcp.NewMetaFromMap(map[string]any{
		MetaToolCallID: out.Call.ToolCallID, MetaAgentTurnID: out.Call.AgentTurnID,
		MetaResultCardID: out.ResultCard.CardID, MetaStatus: string(out.Result.Status),
	})
}

// resultOf maps a UTP outcome to an MCP result: success and partial as
// structuredContent plus the JSON text; anything else as isError with
// "<status>: <code>: <message>" and {status, error} as structuredContent.
func resultOf(out *agent.Outcome) *mcp.CallToolResult {
	res := out.Result
	r := &mcp.CallToolResult{}
	r.Meta = meta(out)
	if res.Status == card.StatusSuccess || res.Status == card.StatusPartial {
		var v any
		if len(res.Result) > 0 && json.Unmarshal(res.Result, &v) == nil {
			if _, isObj := v.(map[string]any); !isObj {
				v = map[string]any{"result": v}
			}
			r.StructuredContent = v
		} else {
			r.StructuredContent = map[string]any{}
		}
		text := []byte("{}")
		var buf bytes.Buffer
		if len(res.Result) > 0 && json.Compact(&buf, res.Result) == nil {
			text = buf.Bytes()
		}
		r.Content = []mcp.Content{mcp.NewTextContent(string(text))}
		return r
	}
	e := res.Error
	if e == nil {
		e = &card.Error{Code: "unknown", Message: "the result has no error"}
	}
	r.IsError = true
	r.StructuredContent = map[string]any{"status": res.Status, "error": e}
	msg := fmt.Sprintf("%s: %s: %s", res.Status, e.Code, e.Message)
	if e.Code == card.CodeAuthFailed {
		msg += " (the mandate the bridge uses does not permit this call: list what it permits with tools/list, or ask the operator for one that does: utpmesh mandate issue)"
	}
	r.Content = []mcp.Content{mcp.NewTextContent(msg)}
	return r
}
