package utp

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// ErrInvalidReport is returned for a report or wakeup that breaks the contract.
var ErrInvalidReport = errors.New("utp: invalid report")

// Report is the callback a tool service sends to the inbox once the
// tool.result card is written. It never carries the result inline.
type Report struct {
	ToolCallID       string              `json:"tool_call_id"`
	AgentTurnID      string              `json:"agent_turn_id"`
	TurnEpoch        int64               `json:"turn_epoch"`
	AgentID          string              `json:"agent_id"`
	ToolResultCardID string              `json:"tool_result_card_id"`
	Status           card.Status         `json:"status"`
	AfterExecution   card.AfterExecution `json:"after_execution"`
	// StepID is carried when known, for replay and resume.
	StepID string `json:"step_id,omitempty"`
	// ToolName is an extension field for logs; receivers may ignore it.
	ToolName string `json:"tool_name,omitempty"`
}

// ParseReport decodes and validates a report body. Unknown fields are
// ignored; an inline "result" is refused.
func ParseReport(data []byte) (*Report, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw == nil {
		return nil, fmt.Errorf("%w: the body is not a JSON object", ErrInvalidReport)
	}
	if _, ok := raw["result"]; ok {
		return nil, fmt.Errorf("%w: result: inline results are not allowed; point at the tool.result card with tool_result_card_id", ErrInvalidReport)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidReport, err)
	}
	if v, ok := raw["turn_epoch"]; !ok || isNull(v) {
		return nil, fmt.Errorf("%w: turn_epoch is required", ErrInvalidReport)
	}
	return &r, r.Validate()
}

// Validate checks the required fields of a report.
func (r *Report) Validate() error {
	for _, f := range []struct{ name, v string }{
		{"tool_call_id", r.ToolCallID}, {"agent_turn_id", r.AgentTurnID},
		{"agent_id", r.AgentID}, {"tool_result_card_id", r.ToolResultCardID},
	} {
		if f.v == "" {
			return fmt.Errorf("%w: %s is required", ErrInvalidReport, f.name)
		}
	}
	if err := card.ValidateName("agent_id", r.AgentID); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidReport, err)
	}
	if r.TurnEpoch < 0 {
		return fmt.Errorf("%w: turn_epoch must not be negative", ErrInvalidReport)
	}
	if !card.ValidID(r.ToolResultCardID) {
		return fmt.Errorf("%w: tool_result_card_id %q is not a canonical UUID", ErrInvalidReport, r.ToolResultCardID)
	}
	if !r.Status.Valid() {
		return fmt.Errorf("%w: status %q is not one of success|failed|canceled|timeout|partial", ErrInvalidReport, r.Status)
	}
	if !r.AfterExecution.Valid() {
		return fmt.Errorf("%w: after_execution %q is not suspend or terminate", ErrInvalidReport, r.AfterExecution)
	}
	return nil
}

// Wakeup is the doorbell the inbox rings on
// cg.<ver>.<project>.<channel>.cmd.agent.<agent_id>.wakeup. The semantic
// content stays in the inbox entry and the tool.result card.
type Wakeup struct {
	AgentID string `json:"agent_id"`
	// InboxID names the inbox entry to acknowledge once consumed.
	InboxID string `json:"inbox_id"`
	// Reason is "tool_result".
	Reason string `json:"reason"`
	// The report's pointer fields.
	AgentTurnID      string              `json:"agent_turn_id"`
	TurnEpoch        int64               `json:"turn_epoch"`
	ToolCallID       string              `json:"tool_call_id"`
	ToolResultCardID string              `json:"tool_result_card_id"`
	Status           card.Status         `json:"status"`
	AfterExecution   card.AfterExecution `json:"after_execution"`
	StepID           string              `json:"step_id,omitempty"`
	// ResultCard, when present, is the tool.result card
	// ToolResultCardID names, exactly as stored: the inbox adds it to a
	// wakeup it rings from the result's commit (a single node) when the
	// card is small, so the agent need not read it. A wakeup without it
	// points at the card only.
	ResultCard json.RawMessage `json:"result_card,omitempty"`
}

// ReasonToolResult is the Reason of a wakeup for a tool result.
const ReasonToolResult = "tool_result"

// NewTraceparent returns a fresh W3C traceparent (version 00, sampled).
func NewTraceparent() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-01"
}

// TraceID extracts the 32-hex-digit trace id of a traceparent, or "".
func TraceID(traceparent string) string {
	parts := strings.Split(traceparent, "-")
	if len(parts) != 4 || len(parts[1]) != 32 {
		return ""
	}
	if _, err := hex.DecodeString(parts[1]); err != nil {
		return ""
	}
	return parts[1]
}

// ValidTraceparent reports whether tp is a version-00 W3C traceparent:
// 00-<32 hex>-<16 hex>-<2 hex>, lower case (TraceID is more lenient: it
// reads the trace id of anything with four parts).
func ValidTraceparent(tp string) bool {
	if len(tp) != 55 || tp[:3] != "00-" || tp[35] != '-' || tp[52] != '-' {
		return false
	}
	for i, c := range tp[3:] {
		if i == 32 || i == 49 {
			continue
		}
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
