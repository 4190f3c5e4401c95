package confirm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The statuses of the convention: StatusPending marks a result that waits;
// a resolution ends it StatusOK (confirmed and run), StatusSkipped
// (cancelled, never run) or StatusFailed (confirmed, and the action
// failed).
const (
	StatusPending = "PENDING_CONFIRM"
	StatusOK      = "OK"
	StatusSkipped = "SKIPPED"
	StatusFailed  = "FAILED"
)

// The resolver tools a Pending that names none is resolved by.
const (
	DefaultConfirmTool = "ATLAS_CONFIRM"
	DefaultCancelTool  = "ATLAS_CANCEL"
)

// MaxIDLen is the longest confirmation id, in bytes.
const MaxIDLen = 128

// Errors of this package.
var (
	// ErrInvalidID: a confirmation id is empty or longer than MaxIDLen.
	ErrInvalidID = errors.New("confirm: invalid confirmation id")
)

// Pending is the result of a call that waits for a human's confirmation
// (the tool.result's content.result, UTP status success).
type Pending struct {
	// Status is StatusPending.
	Status string `json:"status"`
	// ConfirmationID is what the resolver tools take.
	ConfirmationID string `json:"confirmation_id"`
	// ToolName is the tool that asked.
	ToolName string `json:"tool_name"`
	// Would is what the call would do, to show the human: any JSON; an
	// object's "action" string is a one-line summary (Summary).
	Would json.RawMessage `json:"would"`
	// ExpiresAt is when the confirmation lapses (RFC 3339), or empty.
	ExpiresAt string `json:"expires_at"`
	// ConfirmTool and CancelTool name the resolver tools; empty means
	// DefaultConfirmTool and DefaultCancelTool.
	ConfirmTool string `json:"confirm_tool,omitempty"`
	CancelTool  string `json:"cancel_tool,omitempty"`
}

// Parse reports whether a tool result is a Pending: a JSON object whose
// status is StatusPending and whose confirmation_id is not empty.
func Parse(result json.RawMessage) (*Pending, bool) {
	if !bytes.Contains(result, []byte(StatusPending)) {
		return nil, false
	}
	var p Pending
	if json.Unmarshal(result, &p) != nil || p.Status != StatusPending || p.ConfirmationID == "" {
		return nil, false
	}
	return &p, true
}

// Resolvers returns the confirm and cancel tools of p, defaults applied.
func (p *Pending) Resolvers() (confirmTool, cancelTool string) {
	confirmTool, cancelTool = p.ConfirmTool, p.CancelTool
	if confirmTool == "" {
		confirmTool = DefaultConfirmTool
	}
	if cancelTool == "" {
		cancelTool = DefaultCancelTool
	}
	return confirmTool, cancelTool
}

// Resolver returns the tool that confirms p (confirm) or cancels it.
func (p *Pending) Resolver(confirm bool) string {
	c, x := p.Resolvers()
	if confirm {
		return c
	}
	return x
}

// Summary is Would's "action" string, or "".
func (p *Pending) Summary() string {
	var w struct {
		Action string `json:"action"`
	}
	if json.Unmarshal(p.Would, &w) != nil {
		return ""
	}
	return w.Action
}

// Expired reports whether p's ExpiresAt is a time before now; a missing
// or unreadable ExpiresAt never expires.
func (p *Pending) Expired(now time.Time) bool {
	exp, err := time.Parse(time.RFC3339, p.ExpiresAt)
	return err == nil && now.After(exp)
}

// Args are the arguments of a resolver call for confirmation id: the
// JSON {"confirmation_id": id}.
func Args(id string) (json.RawMessage, error) {
	if id == "" || len(id) > MaxIDLen {
		return nil, fmt.Errorf("%w: %d bytes (want 1..%d)", ErrInvalidID, len(id), MaxIDLen)
	}
	return json.Marshal(map[string]string{"confirmation_id": id})
}

// Answer is the result of a resolver call that succeeded (UTP success):
// Status is StatusOK (confirmed; Result is the action's result) or
// StatusSkipped (cancelled). A confirmed action that fails ends the
// resolver call failed, with error.detail {"status": StatusFailed,
// "confirmation_id", "tool_name"}.
type Answer struct {
	Status         string          `json:"status"`
	ConfirmationID string          `json:"confirmation_id"`
	ToolName       string          `json:"tool_name"`
	Result         json.RawMessage `json:"result,omitempty"`
}

// Resolution records a pending call being resolved. It is carried under
// "transition" in the content of a card the resolving service writes into
// the asking call's turn.
type Resolution struct {
	ConfirmationID string `json:"confirmation_id"`
	// ToolCallID and ToolName are the call that asked.
	ToolCallID string `json:"tool_call_id"`
	ToolName   string `json:"tool_name"`
	// From is StatusPending; To is StatusOK, StatusSkipped or StatusFailed.
	From string `json:"from"`
	To   string `json:"to"`
	// ByToolCallID and ByAgentTurnID are the resolver call.
	ByToolCallID  string `json:"by_tool_call_id"`
	ByAgentTurnID string `json:"by_agent_turn_id"`
	// AtUTC is when it was resolved (RFC 3339).
	AtUTC string `json:"at_utc"`
}

// ParseResolution reports whether a card's content is a resolution record:
// a JSON object whose "transition" has a confirmation_id, a tool_call_id
// and a to.
func ParseResolution(content json.RawMessage) (*Resolution, bool) {
	if !bytes.Contains(content, []byte(`"transition"`)) {
		return nil, false
	}
	var rec struct {
		Transition *Resolution `json:"transition"`
	}
	if json.Unmarshal(content, &rec) != nil || rec.Transition == nil {
		return nil, false
	}
	r := rec.Transition
	if r.ConfirmationID == "" || r.ToolCallID == "" || r.To == "" {
		return nil, false
	}
	return r, true
}
