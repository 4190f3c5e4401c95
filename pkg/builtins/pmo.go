// Package builtins holds the mesh's built-in tools (the PMO tools of
// docs/protocol.md §10), which every mesh serves through its worker runtime
// on cg.<ver>.<project>.<channel>.cmd.sys.pmo.internal.<tool>:
//
//   - list_tools: the calling project's registry (plus the built-ins), in the
//     shape an LLM tool list needs.
//   - cancel_tool_call: ends an in-flight call of the same project canceled;
//     a finished call is left unchanged.
//   - mandate_query: the Windley Loop — which tools the caller's mandate
//     permits in the current booking state (pkg/authz.Query).
//
// Their names are reserved in the registry (registry.BuiltinListTools, …);
// they are defined here, not stored per project. They are part of the core,
// not a catalogue: pkg/mesh starts them with every mesh, and a caller that
// runs its own worker runtime (tests, a standalone worker) adds Tools.
package builtins

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// Deps are what the built-ins need.
type Deps struct {
	NC       *nats.Conn
	Store    cardstore.Store
	Registry registry.Registry
	// Holder identifies this process in claims (cancel_tool_call).
	Holder string
	// Mandates answers mandate_query (the Windley Loop); nil: the built-in
	// fails with "authorization is not enabled".
	Mandates MandateQuerier
}

// Tools returns the PMO built-in tools.
func Tools(d Deps) []worker.Tool {
	return []worker.Tool{
		{
			Name:        registry.BuiltinListTools,
			Description: "Lists the tools registered in the calling project, with their parameter schemas.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"include_builtins":{"type":"boolean"}},"additionalProperties":false}`),
			Builtin:     true,
			Handler:     d.listTools,
		},
		{
			Name:        registry.BuiltinCancelToolCall,
			Description: "Cancels an in-flight tool call of the calling project; a finished call is left unchanged.",
			Parameters: json.RawMessage(`{"type":"object","required":["tool_call_id"],"additionalProperties":false,"properties":{
				"tool_call_id":{"type":"string","minLength":1},
				"agent_turn_id":{"type":"string","minLength":1,"description":"defaults to the caller's turn"},
				"reason":{"type":"string","maxLength":1024}}}`),
			Builtin: true,
			Handler: d.cancelToolCall,
		},
		d.mandateQueryTool(),
	}
}

// ToolInfo is one tool as list_tools returns it.
type ToolInfo struct {
	Name           string              `json:"name"`
	Description    string              `json:"description"`
	Parameters     json.RawMessage     `json:"parameters"`
	TargetSubject  string              `json:"target_subject"`
	AfterExecution card.AfterExecution `json:"after_execution"`
	RiskLevel      registry.RiskLevel  `json:"risk_level,omitempty"`
	Confirmation   string              `json:"confirmation,omitempty"`
	Builtin        bool                `json:"builtin,omitempty"`
}

func (d Deps) listTools(ctx context.Context, call *worker.Call) (worker.Result, error) {
	var a struct {
		IncludeBuiltins *bool `json:"include_builtins"`
	}
	if err := call.Bind(&a); err != nil {
		return worker.Result{}, err
	}
	entries, err := d.Registry.List(ctx, call.ProjectID)
	if err != nil {
		return worker.Result{}, worker.Fail(card.CodeUpstreamUnavailable, "registry: "+err.Error())
	}
	out := make([]ToolInfo, 0, len(entries)+2)
	for _, e := range entries {
		out = append(out, ToolInfo{
			Name: e.ToolName, Description: e.Description, Parameters: e.Parameters,
			TargetSubject: e.TargetSubject, AfterExecution: e.AfterExecution,
			RiskLevel: e.Options.RiskLevel, Confirmation: string(e.Options.Confirmation),
		})
	}
	if a.IncludeBuiltins == nil || *a.IncludeBuiltins {
		for _, t := range Tools(d) {
			e := t.Entry(call.ProjectID)
			out = append(out, ToolInfo{
				Name: e.ToolName, Description: e.Description, Parameters: e.Parameters,
				TargetSubject: e.TargetSubject, AfterExecution: e.AfterExecution, Builtin: true,
			})
		}
	}
	return worker.OK(map[string]any{"tools": out, "total": len(out)}), nil
}

func (d Deps) cancelToolCall(ctx context.Context, call *worker.Call) (worker.Result, error) {
	var a struct {
		ToolCallID  string `json:"tool_call_id"`
		AgentTurnID string `json:"agent_turn_id"`
		Reason      string `json:"reason"`
	}
	if err := call.Bind(&a); err != nil {
		return worker.Result{}, err
	}
	if a.AgentTurnID == "" {
		a.AgentTurnID = call.Command.AgentTurnID
	}
	if a.AgentTurnID == call.Command.AgentTurnID && a.ToolCallID == call.Command.ToolCallID {
		return worker.Result{}, worker.Fail(card.CodeBadRequest, "cancel_tool_call cannot cancel itself")
	}
	if a.Reason == "" {
		a.Reason = "requested by agent " + call.Command.AgentID
	}
	outcome, res, err := worker.RequestCancel(ctx, d.NC, d.Store, worker.CancelRequest{
		ProjectID: call.ProjectID, ChannelID: call.ChannelID, Version: call.Version,
		AgentID: call.Command.AgentID, AgentTurnID: a.AgentTurnID, ToolCallID: a.ToolCallID,
		Reason: a.Reason, Holder: d.Holder,
	})
	if err != nil {
		return worker.Result{}, worker.Fail(card.CodeUpstreamUnavailable, fmt.Sprintf("cancel %s: %v", a.ToolCallID, err))
	}
	out := map[string]any{"tool_call_id": a.ToolCallID, "agent_turn_id": a.AgentTurnID, "outcome": outcome}
	if res != nil {
		out["tool_result_card_id"] = res.CardID
		if tr, err := res.ToolResult(); err == nil {
			out["status"] = tr.Status
		}
	}
	return worker.OK(out), nil
}
