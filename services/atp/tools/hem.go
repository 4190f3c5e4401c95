package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atp/atpauthz"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/atp/hem"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/toolkit"
	"github.com/utpmesh/utpmesh/subjects"
)

// HEM tool names: the seed's async tool and the operators' tools.
const (
	ToolHEMList    = "atp_hem_list"
	ToolHEMConfirm = "atp_hem_confirm"
	ToolHEMDecline = "atp_hem_decline"
	// ToolHEMResult is the tool_name of the call card the service writes
	// into the invoking turn when a task resolves (see ResultCallID).
	ToolHEMResult = "atp_hem_task_result"
	// ScopeHEMOperator is the scope of the operators' HEM tools.
	ScopeHEMOperator = "HEM_OPERATOR"
)

// HEMMandateSlack is what a HEM sub-agent's mandate may live beyond the
// HEM's protocol_deadline (decision MCP-D3: hem_timeout_budget + 5 min).
const HEMMandateSlack = 5 * time.Minute

// ResultCallID is the tool_call_id under which a task's resolution is
// reported into the turn that invoked it: "<tool_call_id of the
// atp_invoke_hem call>.hem-result".
func ResultCallID(invokeCallID string) string { return invokeCallID + ".hem-result" }

func (s *Service) hemTools() []spec {
	return []spec{
		{name: ToolInvokeHEM, action: `ATPAction::"invoke_hem"`, scope: ScopeHEMInvoke, risk: registry.RiskHigh,
			desc: "Escalate to a human (HEM). Returns a task_id at once with status PENDING; the HEM runs only after an operator confirms. Poll atp_get_booking_status (pending_hem_tasks, hem_tasks); the resolution also arrives as a tool.result of call <tool_call_id>.hem-result in this turn. trigger_reason MANDATE_GAP_DETECTED uses hem_id HEM-MANDATE-01.",
			params: `{"type":"object","required":["booking_object_id","hem_id","context"],"additionalProperties":false,"properties":{
"booking_object_id":` + bookingIDSchema + `,"hem_id":{"type":"string","pattern":"^HEM-"},
"context":{"type":"object","required":["trigger_reason","agent_assessment"],"properties":{"trigger_reason":{"type":"string","minLength":1},
"agent_assessment":{"type":"string","minLength":1},"recommended_action":{"type":"string"}}}}}`,
			writes: true, run: s.invokeHEM},
		{name: ToolHEMList, action: `ATPAdminAction::"hem_list"`, scope: ScopeHEMOperator, risk: registry.RiskLow, operator: true,
			desc:   "Operators: HEM tasks of the project (status PENDING, COMPLETE, DECLINED or all), with the human_confirmation_token where one is needed.",
			params: `{"type":"object","additionalProperties":false,"properties":{"status":{"enum":["PENDING","COMPLETE","DECLINED"]}}}`,
			run:    s.hemList},
		{name: ToolHEMConfirm, action: `ATPAdminAction::"hem_confirm"`, scope: ScopeHEMOperator, risk: registry.RiskHigh, operator: true,
			desc: "Operators: confirm a PENDING HEM task; the HEM runs and the task ends COMPLETE. A HEM-MANDATE-01 task with a structured request (expansion) issues the agent a sub-mandate narrowed from parent_mandate, the mandate the agent's was narrowed from; one wider than that parent is refused.",
			params: `{"type":"object","required":["task_id"],"additionalProperties":false,"properties":{"task_id":{"type":"string","minLength":1},
"human_confirmation_token":{"type":"string"},"note":{"type":"string"},"parent_mandate":{"type":"string","minLength":1}}}`,
			writes: true, run: s.hemConfirm},
		{name: ToolHEMDecline, action: `ATPAdminAction::"hem_decline"`, scope: ScopeHEMOperator, risk: registry.RiskMedium, operator: true,
			desc: "Operators: decline a PENDING HEM task with a reason; nothing of the HEM runs.",
			params: `{"type":"object","required":["task_id","reason"],"additionalProperties":false,"properties":{"task_id":{"type":"string","minLength":1},
"reason":{"type":"string","minLength":1}}}`,
			writes: true, run: s.hemDecline},
	}
}

func (s *Service) invokeHEM(ctx context.Context, c *worker.Call) (any, error) {
	var a struct {
		bookingArg
		HEMID   string          `json:"hem_id"`
		Context json.RawMessage `json:"context"`
	}
	if err := bind(c, &a); err != nil {
		return nil, err
	}
	if a.BookingObjectID == "" {
		return nil, worker.Fail(card.CodeBadRequest, "atp_invoke_hem escalates about a Booking Object: pass booking_object_id (the booking the HEM is for)")
	}
	// MCP-D6: a mandate permitting invoke_hem must enumerate its hem_ids,
	// checked here on every use, not only when the mandate was issued.
	if tok := callMandate(c); tok != "" {
		if m, err := mandate.Decode(tok); err == nil {
			if err := atpauthz.CheckHEMEnumerated(m.Policies); err != nil {
				return nil, worker.FailDetail(card.CodeAuthFailed, "mandate refused for atp_invoke_hem: "+err.Error(),
					ScopeDenial{Error: authz.ReasonScopeViolation, RequiredScope: ScopeHEMInvoke, MandateScopes: nonNil(authz.Grants(m.Policies)), ATPErrorCode: "MCP-403-SCOPE"})
			}
		}
	}
	// MCP-D3: the mandate of a HEM sub-agent (one narrowed from a parent)
	// lives at most the HEM's timeout budget plus 5 minutes.
	if tok := callMandate(c); tok != "" {
		if m, err := mandate.Decode(tok); err == nil && len(m.Claims.ParentChain) > 0 {
			if e, ok := s.hem.Catalogue().Get(a.HEMID); ok {
				life := time.Duration(m.Claims.ExpiresAt-m.Claims.IssuedAt) * time.Second
				if budget := e.ProtocolDeadline + HEMMandateSlack; life > budget {
					return nil, worker.FailDetail(card.CodeAuthFailed, fmt.Sprintf("mandate %s of a HEM sub-agent lives %s; for %s it may live at most %s (protocol_deadline %s + 5 min, decision MCP-D3): narrow it with --ttl %s",
						m.Claims.JTI, life, e.HEMID, budget, e.Deadline, budget),
						ScopeDenial{Error: authz.ReasonScopeViolation, RequiredScope: ScopeHEMInvoke, MandateScopes: nonNil(authz.Grants(m.Policies)), ATPErrorCode: "MCP-403-SCOPE"})
				}
			}
		}
	}
	var hc struct {
		TriggerReason string `json:"trigger_reason"`
	}
	_ = json.Unmarshal(a.Context, &hc)
	epoch := int64(0)
	if c.CallCard != nil {
		epoch = c.CallCard.Metadata.TurnEpoch
	}
	taskID := callID("hem", c)
	setResult(ctx, taskResult(c.ProjectID, taskID, invokeOutput))
	t, err := s.hem.Invoke(ctx, hem.Invocation{TaskID: taskID, Project: c.ProjectID, HEMID: a.HEMID, BookingID: a.BookingObjectID,
		Context: a.Context, TriggerReason: hc.TriggerReason, AgentID: c.Command.AgentID, AgentTurnID: c.Command.AgentTurnID,
		ToolCallID: c.Command.ToolCallID, TurnEpoch: epoch, Version: c.Version, Channel: c.ChannelID, Requester: requesterOf(c)})
	if err != nil {
		return nil, mapErr(hemErr(err))
	}
	return invokeOutput(t), nil
}

// invokeOutput is atp_invoke_hem's result for task t.
func invokeOutput(t *hem.Task) map[string]any {
	if t.Status == hem.StatusPending {
		out := map[string]any{"task_id": t.TaskID, "status": hem.StatusPending, "confirmation_required": true,
			"elicitation_sent_to": "operator", "hem_id": t.HEMID, "protocol_deadline": t.Deadline,
			"result_tool_call_id": ResultCallID(t.ToolCallID)}
		if t.Expansion != nil {
			// The structured request as the service read it, so a host
			// asking an operator shows the exact action (atpmcp).
			out["expansion"] = t.Expansion
		}
		return out
	}
	return t.PollOutput()
}

// taskResult records a HEM tool's result: out of the task as the call's
// transaction left it (no task: the transaction refused the call).
func taskResult(project, taskID string, out func(t *hem.Task) map[string]any) recorded {
	return func(tx state.Tx) (any, error) {
		raw, found, err := tx.Bucket(project, booking.BucketHEMTasks).Get(taskID)
		if err != nil || !found {
			return nil, err
		}
		t := &hem.Task{}
		if err := json.Unmarshal(raw, t); err != nil {
			return nil, fmt.Errorf("atp: decode HEM task %s: %w", taskID, err)
		}
		return out(t), nil
	}
}

func pollOutput(t *hem.Task) map[string]any { return t.PollOutput() }

// operatorOf returns the name of the operator who made call c, or an
// auth_failed failure: the operator's HEM tools are operator-only in the
// registry (the mesh's admission refuses them to agents), and their
// handlers check it again (defence in depth). An operator's call carries
// the principal "operator:<name>" of the mesh's verified admission; a call
// without an admission is the agent's whose id it carries, and so is
// refused, whatever its mandate permits.
func operatorOf(c *worker.Call) (string, error) {
	if who := toolkit.CallerOf(c); who.IsOperator() {
		return who.Operator, nil
	}
	principal := c.Principal
	if principal == "" {
		principal = utp.PrincipalAgent + ":" + c.Command.AgentID
	}
	return "", worker.FailDetail(card.CodeAuthFailed, fmt.Sprintf("%s is an operator's tool and this call comes from %s: an agent cannot decide a HEM task, not even with a mandate that permits it; an operator runs it (utpmesh hem ls|confirm|decline with an operator's credentials)",
		c.ToolName, principal), ScopeDenial{Error: authz.ReasonScopeViolation, RequiredScope: ScopeHEMOperator, MandateScopes: []string{}, ATPErrorCode: "MCP-403-SCOPE"})
}

func hemErr(err error) error {
	switch {
	case errors.Is(err, hem.ErrUnknownHEM), errors.Is(err, hem.ErrToken), errors.Is(err, hem.ErrNoTask), errors.Is(err, hem.ErrResolved),
		errors.Is(err, hem.ErrBadInput), errors.Is(err, hem.ErrPrecondition):
		return worker.Fail(card.CodeBadRequest, err.Error())
	case errors.Is(err, hem.ErrWrongState):
		return worker.FailDetail(CodeWrongState, err.Error(), map[string]string{"atp_error_code": "MCP-409-STATE"})
	}
	return err
}

func callMandate(c *worker.Call) string {
	var tok string
	if c.CallCard != nil {
		if raw, ok := c.CallCard.Metadata.Extra[authz.MetadataMandate]; ok {
			_ = json.Unmarshal(raw, &tok)
		}
	}
	return tok
}

func (s *Service) hemList(ctx context.Context, c *worker.Call) (any, error) {
	var a struct {
		Status string `json:"status"`
	}
	if err := bind(c, &a); err != nil {
		return nil, err
	}
	ts, err := s.hem.List(ctx, c.ProjectID, a.Status)
	if err != nil {
		return nil, err
	}
	for i, t := range ts {
		ts[i] = t.Redacted()
	}
	return map[string]any{"tasks": ts}, nil
}

func (s *Service) hemConfirm(ctx context.Context, c *worker.Call) (any, error) {
	var a struct {
		TaskID string `json:"task_id"`
		Token  string `json:"human_confirmation_token"`
		Note   string `json:"note"`
		Parent string `json:"parent_mandate"`
	}
	if err := bind(c, &a); err != nil {
		return nil, err
	}
	operator, err := operatorOf(c)
	if err != nil {
		return nil, err
	}
	setResult(ctx, taskResult(c.ProjectID, a.TaskID, pollOutput))
	var grant *hem.Grant
	if cur, err := s.hem.Get(ctx, c.ProjectID, a.TaskID); err == nil && cur.Status == hem.StatusPending && cur.Expansion != nil {
		if err := s.hem.CheckToken(cur, a.Token); err != nil {
			return nil, hemErr(err)
		}
		if grant, err = s.grantExpansion(ctx, c.ProjectID, cur, a.Parent); err != nil {
			return nil, err
		}
	}
	t, err := s.hem.ConfirmGrant(ctx, c.ProjectID, a.TaskID, operator, a.Token, a.Note, grant)
	if err != nil {
		return nil, hemErr(err)
	}
	return t.PollOutput(), nil
}

func (s *Service) hemDecline(ctx context.Context, c *worker.Call) (any, error) {
	var a struct {
		TaskID string `json:"task_id"`
		Reason string `json:"reason"`
	}
	if err := bind(c, &a); err != nil {
		return nil, err
	}
	operator, err := operatorOf(c)
	if err != nil {
		return nil, err
	}
	setResult(ctx, taskResult(c.ProjectID, a.TaskID, pollOutput))
	t, err := s.hem.Decline(ctx, c.ProjectID, a.TaskID, operator, a.Reason)
	if err != nil {
		return nil, hemErr(err)
	}
	return t.PollOutput(), nil
}

// wake reports a resolved task into the turn that invoked it: a tool.call
// card and its tool.result card (the poll output) for call
// ResultCallID(...), and an inbox report, which wakes the agent. The
// original atp_invoke_hem call keeps its single PENDING result. Repeats
// are safe: an existing result is re-reported, and the inbox de-duplicates.
func (s *Service) wake(ctx context.Context, t *hem.Task) error {
	if s.deps.NC == nil && s.deps.Resolve == nil {
		return nil
	}
	nc, st, err := s.deps.Conn(ctx)
	if err != nil {
		return err
	}
	callID := ResultCallID(t.ToolCallID)
	res, err := st.FindToolResult(ctx, t.Project, t.AgentTurnID, callID)
	if errors.Is(err, cardstore.ErrNotFound) {
		res, err = s.writeResolution(ctx, st, t, callID)
	}
	if err != nil {
		return err
	}
	m, err := hemResultOf(t, callID).Report(res)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	m.Header.Set(jetstream.MsgIDHeader, worker.ReportMsgID(res.CardID))
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = js.PublishMsg(pctx, m)
	return err
}

func (s *Service) writeResolution(ctx context.Context, st cardstore.Store, t *hem.Task, callID string) (*card.Card, error) {
	now := time.Now().UTC()
	md := card.Metadata{AgentID: t.AgentID, AgentTurnID: t.AgentTurnID, TurnEpoch: t.TurnEpoch, ToolCallID: callID}
	subj, err := subjects.ToolCommand(t.Version, t.Project, t.Channel, "atp", ToolInvokeHEM)
	if err != nil {
		return nil, err
	}
	target := subj.String()
	args, _ := json.Marshal(map[string]string{"task_id": t.TaskID})
	callContent, _ := json.Marshal(card.ToolCallContent{ToolName: ToolHEMResult, Arguments: args, TargetSubject: target})
	callCard := &card.Card{CardID: card.NewID(), ProjectID: t.Project, Type: card.TypeToolCall, AuthorID: "atp", Content: callContent,
		Metadata: md, ToolCallID: callID, CreatedAt: now}
	if err := st.Put(ctx, callCard); err != nil && !errors.Is(err, cardstore.ErrConflict) {
		return nil, fmt.Errorf("atp: write the resolution call card: %w", err)
	}
	value, _ := json.Marshal(t.ResolutionOutput())
	res, err := hemResultOf(t, callID).Card(card.ToolResultContent{Status: card.StatusSuccess, AfterExecution: card.Suspend, Result: value}, nil)
	if err != nil {
		return nil, err
	}
	if res, _, err = worker.WriteResult(ctx, st, res); err != nil {
		return nil, fmt.Errorf("atp: write the resolution result card: %w", err)
	}
	return res, nil
}

// hemResultOf names the resolution call callID of task t for its result
// card and report (worker.ResultOf, the one builder of both).
func hemResultOf(t *hem.Task, callID string) worker.ResultOf {
	return worker.ResultOf{Version: t.Version, ProjectID: t.Project, ChannelID: t.Channel, AgentID: t.AgentID,
		AgentTurnID: t.AgentTurnID, TurnEpoch: t.TurnEpoch, ToolCallID: callID, ToolName: ToolHEMResult, AuthorID: "atp"}
}
