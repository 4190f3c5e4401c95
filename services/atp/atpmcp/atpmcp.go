// Package atpmcp is the ATP catalogue's renderer in the MCP bridge
// (pkg/apps/mcpbridge): an atp_invoke_hem whose result is PENDING waits
// for an operator (a mcpbridge.Handoff). The bridge serves atp_invoke_hem
// as an MCP task whose result is the "<tool_call_id>.hem-result" call the
// ATP service writes into the turn. With operator credentials
// (HEM.Operator; utpmesh mcp --operator-creds) the host is asked whatever
// its mandate, else only a host whose mandate permits atp_hem_list and
// atp_hem_confirm; the answer confirms
// (atp_hem_list for the task's human_confirmation_token, then
// atp_hem_confirm) or declines (atp_hem_decline with the reason) the task.
//
// The HEM tools are operator-only (issue 23): an agent cannot decide a
// HEM, so the answer is carried out as an operator only when the bridge
// was given an operator's credentials (HEM.Operator); without them the
// host is told what an operator runs, and nothing is called as the agent.
//
// The command line registers it (mcpbridge.RegisterHandoff) with ATP's
// other contributions.
package atpmcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/services/atp/hem"
	atptools "github.com/utpmesh/utpmesh/services/atp/tools"
)

// HEM is ATP's handoff: atp_invoke_hem tasks waiting for an operator.
type HEM struct {
	// Operator makes one call as the operator whose credentials the
	// bridge was given (dispatched with the principal operator:<name>);
	// nil when it has none: then Resolve refuses and says what an
	// operator runs.
	Operator mcpbridge.CallFunc
}

// ErrNoOperator: the bridge has no operator credentials, so it cannot
// decide a HEM task (an agent may not); the error says what an operator
// runs.
var ErrNoOperator = errors.New("atpmcp: this bridge has no operator credentials")

var _ mcpbridge.Handoff = HEM{}

// Owns implements mcpbridge.Handoff: atp_invoke_hem.
func (HEM) Owns(tool string) bool { return tool == atptools.ToolInvokeHEM }

// pending is the first result of an atp_invoke_hem that waits for an
// operator (docs/protocol.md §18).
type pending struct {
	TaskID           string         `json:"task_id"`
	Status           string         `json:"status"`
	HEMID            string         `json:"hem_id"`
	ProtocolDeadline string         `json:"protocol_deadline"`
	ResultToolCallID string         `json:"result_tool_call_id"`
	Expansion        *hem.Expansion `json:"expansion"`
}

// Pending implements mcpbridge.Handoff: a result of status PENDING with a
// task_id. With operator credentials (h.Operator) the host is asked
// whatever its mandate: the person at the host decides as that operator.
// Without them, only a host whose mandate names the HEM tools is asked
// (and Resolve says what an operator runs).
func (h HEM) Pending(result json.RawMessage) (*mcpbridge.HandoffTask, bool) {
	var p pending
	if json.Unmarshal(result, &p) != nil || p.Status != hem.StatusPending || p.TaskID == "" {
		return nil, false
	}
	q := fmt.Sprintf("atp_invoke_hem asks an operator to confirm HEM task %s (%s)", p.TaskID, p.HEMID)
	if x := p.Expansion; x != nil {
		// The seed's structured escalation of a mandate gap (MCP-D15).
		q += fmt.Sprintf(": a mandate expansion adding %s", x.Action)
		if x.ResourceCondition != "" {
			q += " on " + x.ResourceCondition
		}
	}
	if p.ProtocolDeadline != "" {
		q += "; without a decision it is decided at " + p.ProtocolDeadline
	}
	t := &mcpbridge.HandoffTask{ID: p.TaskID, Label: fmt.Sprintf("HEM task %s (%s)", p.TaskID, p.HEMID),
		Question: q + ". Run the HEM? (false declines it: give a reason)", ResultToolCallID: p.ResultToolCallID}
	if h.Operator == nil {
		t.Operators = []string{atptools.ToolHEMList, atptools.ToolHEMConfirm}
	}
	return t, true
}

// Hint implements mcpbridge.Handoff.
func (HEM) Hint(taskID string) string {
	return fmt.Sprintf("an operator (not an agent: the HEM tools are operator-only) confirms it with %s {\"task_id\":%q} (utpmesh hem confirm %s) or declines it with %s {\"task_id\":%q,\"reason\":…} (utpmesh hem decline %s --reason …)",
		atptools.ToolHEMConfirm, taskID, taskID, atptools.ToolHEMDecline, taskID, taskID)
}

// Resolve implements mcpbridge.Handoff: a decline is atp_hem_decline with
// the reason; a confirmation reads the task's human_confirmation_token
// with atp_hem_list and runs atp_hem_confirm with it and the note. Every
// call is the operator's (h.Operator), never the session agent's (call);
// without operator credentials it returns ErrNoOperator with the hint.
func (h HEM) Resolve(ctx context.Context, _ mcpbridge.CallFunc, taskID string, yes bool, reason, note string) (*agent.Outcome, error) {
	if h.Operator == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoOperator, h.Hint(taskID))
	}
	call := h.Operator
	if !yes {
		args, _ := json.Marshal(map[string]string{"task_id": taskID, "reason": reason})
		return call(ctx, atptools.ToolHEMDecline, args)
	}
	args, _ := json.Marshal(map[string]string{"status": hem.StatusPending})
	out, err := call(ctx, atptools.ToolHEMList, args)
	if err != nil || out.Result.Status != card.StatusSuccess {
		return out, err
	}
	var list struct {
		Tasks []struct {
			TaskID string `json:"task_id"`
			Token  string `json:"human_confirmation_token"`
		} `json:"tasks"`
	}
	_ = json.Unmarshal(out.Result.Result, &list)
	confirm := map[string]string{"task_id": taskID, "note": note}
	for _, t := range list.Tasks {
		if t.TaskID == taskID && t.Token != "" {
			confirm["human_confirmation_token"] = t.Token
		}
	}
	args, _ = json.Marshal(confirm)
	return call(ctx, atptools.ToolHEMConfirm, args)
}
