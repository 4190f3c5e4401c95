package windley

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// Service is the tool service whose state events the loop follows.
const Service = "atp"

// ErrNotPermitted is returned by Loop.Call for a tool the current residual
// set does not permit: the call is not dispatched (MCP-D15: the agent MUST
// NOT attempt it; escalate the gap instead).
var ErrNotPermitted = errors.New("windley: not permitted by the current residual set")

// ErrNotResolved is returned by ReadResolution while the HEM task has not
// resolved.
var ErrNotResolved = errors.New("windley: HEM task not resolved yet")

// Requery is one re-query the loop ran on a state event.
type Requery struct {
	// Event is the booking's state event.
	Event *utp.StateEvent
	// Residual is the new residual set (nil when Err is set).
	Residual *authz.Residual
	Err      error
}

// Follow subscribes to the state events of booking bookingID (subjects
// StateEvent, docs/protocol.md "State events") and re-runs the query on
// each transition to a state the loop has not queried (decision MCP-D14:
// state transitions, not a timer, trigger the re-query). Call it before
// Start, so that no transition falls between the pre-session query and
// the subscription. onRequery, when set, is called after each re-query
// the events caused. stop ends the subscription.
func (w *Loop) Follow(ctx context.Context, bookingID string, onRequery func(Requery)) (stop func() error, err error) {
	return w.c.StateEvents(ctx, Service, bookingID, func(ev *utp.StateEvent) {
		w.mu.Lock()
		w.events++
		w.mu.Unlock()
		r, again, err := w.BookingState(context.WithoutCancel(ctx), ev.NewState)
		if !again && err == nil {
			return
		}
		if onRequery != nil {
			onRequery(Requery{Event: ev, Residual: r, Err: err})
		}
	})
}

// Events counts the state events Follow received.
func (w *Loop) Events() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.events
}

// Call makes the call req only when the current residual set permits its
// tool (for atp_invoke_hem: its hem_id, hemID); otherwise it returns
// ErrNotPermitted without dispatching anything. req.Mandate defaults to the
// loop's mandate.
func (w *Loop) Call(ctx context.Context, req agent.CallRequest, hemID string) (*agent.Outcome, error) {
	if !w.Permits(req.ToolName, hemID) {
		st := "unknown"
		if r := w.Residual(); r != nil && r.State != nil {
			st = *r.State
		}
		return nil, fmt.Errorf("%w: %s (booking state %s); escalate the gap (NewMandateGap, EscalateMandateGap) instead of calling it", ErrNotPermitted, req.ToolName, st)
	}
	if req.Mandate == "" {
		req.Mandate = w.Mandate()
	}
	return w.c.Call(ctx, req)
}

// Resolution is a HEM task's resolution as the invoking turn receives it
// (the tool.result of call <tool_call_id>.hem-result).
type Resolution struct {
	TaskID string `json:"task_id"`
	// Status is COMPLETE or DECLINED.
	Status string `json:"status"`
	HEMID  string `json:"hem_id"`
	// ConfirmedBy / DeclinedBy are "operator" or "protocol_deadline";
	// Operator names the operator who decided.
	ConfirmedBy string `json:"confirmed_by,omitempty"`
	DeclinedBy  string `json:"declined_by,omitempty"`
	Operator    string `json:"operator,omitempty"`
	Reason      string `json:"reason,omitempty"`
	// Mandate is the narrowed sub-mandate an approved HEM-MANDATE-01
	// expansion issued ("" otherwise), MandateJTI its jti and
	// GrantedPolicy the permit it added.
	Mandate       string `json:"mandate,omitempty"`
	MandateJTI    string `json:"mandate_jti,omitempty"`
	GrantedPolicy string `json:"granted_policy,omitempty"`
}

// ResultCallID is the tool_call_id of a HEM task's resolution in the
// invoking turn: "<tool_call_id of the atp_invoke_hem call>.hem-result".
func ResultCallID(invokeCallID string) string { return invokeCallID + ".hem-result" }

// ReadResolution reads the resolution of the atp_invoke_hem call
// invokeCallID of turn turnID (the card the agent's wakeup for
// ResultCallID(invokeCallID) points at); ErrNotResolved before it exists.
func ReadResolution(ctx context.Context, c *agent.Client, turnID, invokeCallID string) (*Resolution, error) {
	res, err := c.Store().FindToolResult(ctx, c.Project(), turnID, ResultCallID(invokeCallID))
	if errors.Is(err, cardstore.ErrNotFound) {
		return nil, fmt.Errorf("%w: no result of %s in turn %s", ErrNotResolved, ResultCallID(invokeCallID), turnID)
	}
	if err != nil {
		return nil, fmt.Errorf("windley: read the HEM resolution: %w", err)
	}
	tr, err := res.ToolResult()
	if err != nil {
		return nil, fmt.Errorf("windley: HEM resolution card %s: %w", res.CardID, err)
	}
	var r Resolution
	if err := json.Unmarshal(tr.Result, &r); err != nil {
		return nil, fmt.Errorf("windley: HEM resolution card %s: %w", res.CardID, err)
	}
	return &r, nil
}

// Resolved applies a HEM task's resolution (seed §3.4A.3: HEM completion
// and mandate update trigger a re-query): a granted sub-mandate replaces
// the loop's mandate and is queried at once; otherwise the booking's
// state (read by the caller after the resolution, "" when unknown)
// re-queries if it changed.
func (w *Loop) Resolved(ctx context.Context, r *Resolution, bookingState string) (*authz.Residual, error) {
	if r.Mandate != "" {
		return w.NewMandate(ctx, r.Mandate)
	}
	if bookingState == "" {
		return w.Residual(), nil
	}
	res, _, err := w.HEMCompleted(ctx, bookingState)
	return res, err
}
