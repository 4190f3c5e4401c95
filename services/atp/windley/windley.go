package windley

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/registry"
)

// Windley Loop constants (seed ATP addendum, section 3.4A).
const (
	// TriggerMandateGap is the atp_invoke_hem context.trigger_reason of a
	// mandate expansion request (MCP-D15).
	TriggerMandateGap = "MANDATE_GAP_DETECTED"
	// HEMMandateGap is the hem_id of mandate-gap escalations.
	HEMMandateGap = "HEM-MANDATE-01"
	// ToolInvokeHEM is the ATP tool the escalation is routed through.
	ToolInvokeHEM = "atp_invoke_hem"
)

// ErrNotAGap is returned by NewMandateGap for a tool the residual set
// already permits.
var ErrNotAGap = errors.New("windley: not a mandate gap")

// ErrInvalid: a request breaks a rule; the message says which.
var ErrInvalid = errors.New("windley: invalid request")

// QueryMandate runs the PMO built-in mandate_query for the agent c: Cedar
// partial evaluation of mandate (default c's Config.Mandate) against
// bookingState (nil when unknown). turnID is the turn the query belongs to.
func QueryMandate(ctx context.Context, c *agent.Client, turnID, mandate string, bookingState *string) (*authz.Residual, error) {
	args := map[string]any{}
	if bookingState != nil {
		args["booking_state"] = *bookingState
	}
	raw, _ := json.Marshal(args)
	var r authz.Residual
	if _, err := c.CallInto(ctx, agent.CallRequest{ToolName: registry.BuiltinMandateQuery, Arguments: raw, AgentTurnID: turnID, Mandate: mandate}, &r); err != nil {
		return nil, fmt.Errorf("windley: %w", err)
	}
	return &r, nil
}

// Loop keeps an agent's permitted action space current (seed
// decisions MCP-D13, MCP-D14): Start queries before planning; the query is
// re-run on a booking state transition (BookingState with a new state), on
// HEM completion (HEMCompleted, which re-queries only if the state
// changed) and on a new mandate (NewMandate) — never on a timer. It is
// safe for concurrent use.
type Loop struct {
	c    *agent.Client
	turn string

	mu       sync.Mutex
	mandate  string
	state    *string
	residual *authz.Residual
	queries  int
	events   int
}

// NewLoop returns a loop for agent c's turn, evaluating mandate ("": c's
// Config.Mandate, which its calls carry too).
func NewLoop(c *agent.Client, turnID, mandate string) *Loop {
	return &Loop{c: c, turn: turnID, mandate: mandate}
}

// Start runs the pre-planning query for bookingState (nil: unknown).
func (w *Loop) Start(ctx context.Context, bookingState *string) (*authz.Residual, error) {
	w.mu.Lock()
	w.state = cloneStr(bookingState)
	w.mu.Unlock()
	return w.requery(ctx)
}

// BookingState reports the booking's state after a tool call that may
// have changed it; the loop re-queries when it differs from the last one.
// requeried says whether it did.
func (w *Loop) BookingState(ctx context.Context, state string) (r *authz.Residual, requeried bool, err error) {
	w.mu.Lock()
	same := w.state != nil && *w.state == state && w.residual != nil
	if !same {
		w.state = &state
	}
	r = w.residual
	w.mu.Unlock()
	if same {
		return r, false, nil
	}
	r, err = w.requery(ctx)
	return r, err == nil, err
}

// HEMCompleted is called when an atp_invoke_hem task resolves (COMPLETE or
// DECLINED) with the booking's state read afterwards.
func (w *Loop) HEMCompleted(ctx context.Context, state string) (*authz.Residual, bool, error) {
	return w.BookingState(ctx, state)
}

// NewMandate replaces the mandate (after an expansion was granted) and
// re-queries at once.
func (w *Loop) NewMandate(ctx context.Context, mandate string) (*authz.Residual, error) {
	w.mu.Lock()
	w.mandate = mandate
	w.mu.Unlock()
	return w.requery(ctx)
}

// Residual is the current residual set (nil before Start).
func (w *Loop) Residual() *authz.Residual {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.residual
}

// Mandate is the mandate the loop evaluates ("": the client's); calls
// should carry it.
func (w *Loop) Mandate() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mandate
}

// Queries counts the queries run.
func (w *Loop) Queries() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.queries
}

// Permits reports whether the residual set permits tool (for invoke_hem:
// with hemID).
func (w *Loop) Permits(tool, hemID string) bool {
	r := w.Residual()
	return r != nil && r.Allows(tool, hemID)
}

func (w *Loop) requery(ctx context.Context) (*authz.Residual, error) {
	w.mu.Lock()
	m, st := w.mandate, cloneStr(w.state)
	w.queries++
	w.mu.Unlock()
	r, err := QueryMandate(ctx, w.c, w.turn, m, st)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.residual = r
	w.mu.Unlock()
	return r, nil
}

func cloneStr(s *string) *string {
	if s == nil {
		return nil
	}
	v := *s
	return &v
}

// MandateGap is a structured mandate expansion request (MCP-D15): the
// exact Cedar action and resource condition the mandate lacks.
type MandateGap struct {
	// MissingAction is the Cedar action, e.g. ATPAction::"record_safety_check".
	MissingAction string `json:"missing_action"`
	// ToolName is the tool the plan needs.
	ToolName string `json:"tool_name"`
	// ResourceCondition is the resource the action is needed on, as a
	// Cedar condition.
	ResourceCondition string `json:"resource_condition"`
	// BookingObjectID is the booking the agent is bound to (null: none).
	BookingObjectID *string `json:"booking_object_id"`
	// HEMID and BookingState are set for HEM_INVOKE gaps.
	HEMID        string `json:"hem_id,omitempty"`
	BookingState string `json:"booking_state,omitempty"`
	// MandateJTI is the mandate that lacks the action.
	MandateJTI string `json:"mandate_jti,omitempty"`
	// AgentAssessment says why the action is needed.
	AgentAssessment string `json:"agent_assessment"`
}

// NewMandateGap builds the expansion request for calling tool (whose Cedar
// action is action) with hemID (for invoke_hem), from residual r. It
// returns ErrNotAGap when r already permits the call.
func NewMandateGap(r *authz.Residual, tool, action, hemID, assessment string) (*MandateGap, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: no residual set (run the Windley query first)", ErrInvalid)
	}
	if tool == "" || action == "" || assessment == "" {
		return nil, fmt.Errorf("%w: tool, action and agent_assessment are required", ErrInvalid)
	}
	if r.Allows(tool, hemID) {
		return nil, fmt.Errorf("%w: %s is permitted", ErrNotAGap, tool)
	}
	g := &MandateGap{MissingAction: action, ToolName: tool, MandateJTI: r.MandateJTI, AgentAssessment: assessment,
		ResourceCondition: fmt.Sprintf("resource == Project::%q", r.ProjectID)}
	if r.ResourceID != nil {
		b := *r.ResourceID
		g.BookingObjectID = &b
		g.ResourceCondition = fmt.Sprintf("resource == Booking::%q", b)
	}
	if hemID != "" {
		g.HEMID = hemID
		if r.State != nil {
			g.BookingState = *r.State
		}
	}
	return g, nil
}

// InvokeHEMArguments are the atp_invoke_hem arguments that route the gap to
// the operator: hem_id HEM-MANDATE-01, context.trigger_reason
// MANDATE_GAP_DETECTED, and the structured request (as JSON text) in
// context.agent_assessment.
func (g *MandateGap) InvokeHEMArguments() (json.RawMessage, error) {
	desc, err := json.Marshal(g)
	if err != nil {
		return nil, fmt.Errorf("windley: encode mandate gap: %w", err)
	}
	args := map[string]any{
		"hem_id": HEMMandateGap,
		"context": map[string]any{
			"trigger_reason":     TriggerMandateGap,
			"agent_assessment":   string(desc),
			"recommended_action": fmt.Sprintf("issue a sub-mandate that adds %s on %s", g.MissingAction, g.ResourceCondition),
		},
	}
	if g.BookingObjectID != nil {
		args["booking_object_id"] = *g.BookingObjectID
	}
	return json.Marshal(args)
}

// EscalateMandateGap calls atp_invoke_hem with the gap's arguments, under
// mandate (default c's Config.Mandate). The mandate must itself permit
// invoke_hem for HEM-MANDATE-01.
func EscalateMandateGap(ctx context.Context, c *agent.Client, turnID, mandate string, g *MandateGap) (*agent.Outcome, error) {
	args, err := g.InvokeHEMArguments()
	if err != nil {
		return nil, err
	}
	return c.Call(ctx, agent.CallRequest{ToolName: ToolInvokeHEM, Arguments: args, AgentTurnID: turnID, Mandate: mandate})
}
