// Package atpui is the ATP catalogue's queue in the web UI
// (pkg/apps/webui): the pending atp_invoke_hem tasks, each with its
// protocol_deadline and confirmation prompt (for HEM-MANDATE-01 the
// structured escalation: the exact Cedar action and resource condition
// requested), which an operator confirms or declines from /escalations.
// Every call is the operator's (webui.OperatorCall: utpmesh ui
// --operator-creds); the command line registers it with ATP's other
// contributions.
package atpui

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/apps/webui"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/services/atp/hem"
	atptools "github.com/utpmesh/utpmesh/services/atp/tools"
)

// HEM is ATP's escalation queue: PENDING HEM tasks.
type HEM struct {
	// ParentMandate is the mandate an approved HEM-MANDATE-01 expansion
	// is narrowed from (the UI's operator mandate, e.g. the demo mandate
	// of a local up); "": such approvals are refused, saying to pass one.
	ParentMandate string
}

var _ webui.Escalations = HEM{}

// Kind implements webui.Escalations.
func (HEM) Kind() string { return "HEM tasks" }

// task is what the UI needs of an atp_hem_list task.
type task struct {
	TaskID   string    `json:"task_id"`
	HEMID    string    `json:"hem_id"`
	Booking  string    `json:"booking_object_id"`
	AgentID  string    `json:"agent_id"`
	Deadline time.Time `json:"protocol_deadline"`
	Token    string    `json:"human_confirmation_token"`
	Prompt   string    `json:"confirmation_prompt"`
	Expanded *struct{} `json:"expansion"`
}

func pending(ctx context.Context, call webui.OperatorCall) ([]task, error) {
	args, _ := json.Marshal(map[string]string{"status": hem.StatusPending})
	out, err := call(ctx, atptools.ToolHEMList, args)
	if err := callErr(atptools.ToolHEMList, out, err); err != nil {
		return nil, err
	}
	var list struct {
		Tasks []task `json:"tasks"`
	}
	if err := json.Unmarshal(out.Result.Result, &list); err != nil {
		return nil, fmt.Errorf("atpui: %s result: %w", atptools.ToolHEMList, err)
	}
	return list.Tasks, nil
}

// Pending implements webui.Escalations: atp_hem_list of the PENDING tasks.
func (HEM) Pending(ctx context.Context, call webui.OperatorCall) ([]webui.Escalation, error) {
	ts, err := pending(ctx, call)
	if err != nil {
		return nil, err
	}
	out := make([]webui.Escalation, 0, len(ts))
	for _, t := range ts {
		title := t.HEMID
		if t.Booking != "" {
			title += " on booking " + t.Booking
		}
		out = append(out, webui.Escalation{ID: t.TaskID, Title: title, Prompt: t.Prompt, From: t.AgentID, Deadline: t.Deadline})
	}
	return out, nil
}

// Decide implements webui.Escalations: atp_hem_decline with the reason, or
// atp_hem_confirm with the task's human_confirmation_token (read with
// atp_hem_list) and, for a mandate expansion, the parent mandate.
func (h HEM) Decide(ctx context.Context, call webui.OperatorCall, id string, yes bool, reason string) (webui.Decision, error) {
	tool, a := atptools.ToolHEMDecline, map[string]string{"task_id": id, "reason": reason}
	if yes {
		ts, err := pending(ctx, call)
		if err != nil {
			return webui.Decision{}, err
		}
		tool, a = atptools.ToolHEMConfirm, map[string]string{"task_id": id}
		for _, t := range ts {
			if t.TaskID != id {
				continue
			}
			if t.Token != "" {
				a["human_confirmation_token"] = t.Token
			}
			if t.Expanded != nil && h.ParentMandate != "" {
				a["parent_mandate"] = h.ParentMandate
			}
		}
	}
	args, _ := json.Marshal(a)
	out, err := call(ctx, tool, args)
	if err := callErr(tool, out, err); err != nil {
		d := webui.Decision{}
		if out != nil && out.Result != nil {
			d.Result = out.Result.Result
		}
		return d, err
	}
	var r struct {
		Status   string `json:"status"`
		Operator string `json:"operator"`
		Reason   string `json:"reason"`
		JTI      string `json:"mandate_jti"`
		Parent   string `json:"parent_mandate_jti"`
		Outcome  string `json:"hem_outcome"`
	}
	_ = json.Unmarshal(out.Result.Result, &r)
	d := webui.Decision{Status: r.Status, Operator: r.Operator, Result: out.Result.Result}
	switch {
	case r.JTI != "":
		d.Summary = fmt.Sprintf("%s: sub-mandate %s issued (narrowed from %s) and delivered to the agent's turn", r.Outcome, r.JTI, r.Parent)
	case r.Status == hem.StatusDeclined:
		d.Summary = "declined: " + r.Reason + " (the agent's turn gets the reason)"
	default:
		d.Summary = r.Outcome
	}
	return d, nil
}

// callErr is err, or the failure of out's result, naming tool.
func callErr(tool string, out *agent.Outcome, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("atpui: %s: %w", tool, err)
	case out == nil || out.Result == nil:
		return fmt.Errorf("atpui: %s: no result", tool)
	case out.Result.Status != card.StatusSuccess:
		if e := out.Result.Error; e != nil {
			return fmt.Errorf("%s: %s: %s", tool, e.Code, e.Message)
		}
		return fmt.Errorf("%s: %s", tool, out.Result.Status)
	}
	return nil
}
