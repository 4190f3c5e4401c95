package utp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// ErrInvalidCommand is wrapped by every *CommandError.
var ErrInvalidCommand = errors.New("utp: invalid command")

// Headers the mesh reads and writes.
const (
	// HeaderTraceparent and HeaderTracestate carry W3C trace context.
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
	// CommonGround v1r4 identity headers, accepted as alternatives to the
	// payload fields of the same meaning (v1r4 runtimes send only these).
	// When a field arrives both ways, the two values must agree.
	HeaderProjectID   = "CG-Project-Id"
	HeaderChannelID   = "CG-Channel-Id"
	HeaderAgentID     = "CG-Agent-Id"
	HeaderAgentTurnID = "CG-Turn-Id"
	HeaderTurnEpoch   = "CG-Turn-Epoch"
	HeaderToolCallID  = "CG-Tool-Call-Id"
	HeaderStepID      = "CG-Step-Id"
	// HeaderRecursionDepth is CommonGround's call-chain depth; the mesh
	// passes it through unchanged.
	HeaderRecursionDepth = "CG-Recursion-Depth"
	// HeaderMsgType, HeaderVersion, HeaderSender and HeaderTimestamp are
	// CommonGround's envelope headers. The agent client (commands) and the
	// inbox (wakeups) set them; every receiver ignores them on input.
	HeaderMsgType   = "CG-Msg-Type"
	HeaderVersion   = "CG-Version"
	HeaderSender    = "CG-Sender"
	HeaderTimestamp = "CG-Timestamp"
)

// BannedFields are payload fields a tool command must not carry: parameters
// belong in the tool.call card, results in the tool.result card.
var BannedFields = []string{"args", "arguments", "result"}

// Command is the body of a tool command.
type Command struct {
	// AgentID is the agent whose turn made the call. Required.
	AgentID string `json:"agent_id"`
	// AgentTurnID is the turn. Required.
	AgentTurnID string `json:"agent_turn_id"`
	// TurnEpoch is the turn's epoch when the call was made. Required, ≥ 0.
	TurnEpoch int64 `json:"turn_epoch"`
	// ToolCallID identifies the call within the turn. Required.
	ToolCallID string `json:"tool_call_id"`
	// AfterExecution is suspend or terminate. Required.
	AfterExecution card.AfterExecution `json:"after_execution"`
	// ToolCallCardID points at the tool.call card holding the arguments. Required.
	ToolCallCardID string `json:"tool_call_card_id"`
	// StepID is the reasoning step; required for PMO built-ins.
	StepID string `json:"step_id,omitempty"`
	// ToolName is the tool; required for PMO built-ins, useful everywhere.
	ToolName string `json:"tool_name,omitempty"`
	// ContextBoxID optionally points at the turn's context box.
	ContextBoxID string `json:"context_box_id,omitempty"`
	// DispatchRequestedAt is when the runtime dispatched the call (optional).
	DispatchRequestedAt *time.Time `json:"dispatch_requested_at,omitempty"`
}

// CommandError says why a command was refused. Field names the offending
// payload field. Routable reports whether the command still carries enough
// (agent_id, agent_turn_id, turn_epoch, tool_call_id) for a failed
// tool.result card and a report; when it does not, the command goes to the
// dead-letter subject instead.
type CommandError struct {
	Field    string
	Reason   string
	Routable bool
	// Partial is what could be read of the command (for the failure path).
	Partial Command
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("invalid tool command: %s: %s", e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidCommand) true.
func (e *CommandError) Unwrap() error { return ErrInvalidCommand }

// ParseCommand decodes and validates a tool command body with its headers.
// project and channel are the subject's; CG-Project-Id and CG-Channel-Id
// headers, when present, must equal them. pmo selects the stricter PMO
// built-in rules. It never panics; a refused command returns a *CommandError.
func ParseCommand(data []byte, hdr nats.Header, project, channel string, pmo bool) (*Command, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw == nil {
		reason := "the body is not a JSON object"
		if err != nil {
			reason += ": " + err.Error()
		}
		return nil, &CommandError{Field: "(body)", Reason: reason}
	}
	var c Command
	var firstErr *CommandError
	fail := func(field, reason string) {
		if firstErr == nil {
			firstErr = &CommandError{Field: field, Reason: reason}
		}
	}
	str := func(field, header string, dst *string) {
		var h string
		if header != "" && hdr != nil {
			h = hdr.Get(header)
		}
		if v, ok := raw[field]; ok && !isNull(v) {
			if err := json.Unmarshal(v, dst); err != nil {
				fail(field, "must be a string")
				return
			}
			if h != "" && h != *dst {
				fail(field, fmt.Sprintf("payload value %q differs from header %s %q", *dst, header, h))
			}
		} else {
			*dst = h
		}
		if len(*dst) > card.MaxIDLen {
			fail(field, fmt.Sprintf("is longer than %d bytes", card.MaxIDLen))
		}
	}
	str("agent_id", HeaderAgentID, &c.AgentID)
	str("agent_turn_id", HeaderAgentTurnID, &c.AgentTurnID)
	str("tool_call_id", HeaderToolCallID, &c.ToolCallID)
	str("tool_call_card_id", "", &c.ToolCallCardID)
	str("step_id", HeaderStepID, &c.StepID)
	str("tool_name", "", &c.ToolName)
	str("context_box_id", "", &c.ContextBoxID)
	var ae string
	str("after_execution", "", &ae)
	c.AfterExecution = card.AfterExecution(ae)

	epochSeen := false
	if v, ok := raw["turn_epoch"]; ok && !isNull(v) {
		epochSeen = true
		if err := json.Unmarshal(v, &c.TurnEpoch); err != nil {
			fail("turn_epoch", "must be an integer")
			epochSeen = false
		} else if h := hdr.Get(HeaderTurnEpoch); h != "" && h != strconv.FormatInt(c.TurnEpoch, 10) {
			fail("turn_epoch", fmt.Sprintf("payload value %d differs from header %s %q", c.TurnEpoch, HeaderTurnEpoch, h))
		}
	} else if hdr != nil && hdr.Get(HeaderTurnEpoch) != "" {
		n, err := strconv.ParseInt(hdr.Get(HeaderTurnEpoch), 10, 64)
		if err != nil {
			fail("turn_epoch", "header "+HeaderTurnEpoch+" must be an integer")
		} else {
			c.TurnEpoch, epochSeen = n, true
		}
	}
	if v, ok := raw["dispatch_requested_at"]; ok && !isNull(v) {
		var t time.Time
		if err := json.Unmarshal(v, &t); err != nil {
			fail("dispatch_requested_at", "must be an RFC 3339 time")
		} else {
			c.DispatchRequestedAt = &t
		}
	}

	if h := hdr.Get(HeaderProjectID); h != "" && h != project {
		fail("project_id", fmt.Sprintf("header %s %q differs from the subject's project %q", HeaderProjectID, h, project))
	}
	if h := hdr.Get(HeaderChannelID); h != "" && h != channel {
		fail("channel_id", fmt.Sprintf("header %s %q differs from the subject's channel %q", HeaderChannelID, h, channel))
	}
	for _, f := range BannedFields {
		if _, ok := raw[f]; ok {
			fail(f, "inline "+f+" is not allowed: parameters are read from the tool.call card named by tool_call_card_id")
		}
	}
	required := []struct {
		name string
		ok   bool
	}{
		{"agent_id", c.AgentID != ""},
		{"agent_turn_id", c.AgentTurnID != ""},
		{"turn_epoch", epochSeen},
		{"tool_call_id", c.ToolCallID != ""},
		{"after_execution", ae != ""},
		{"tool_call_card_id", c.ToolCallCardID != ""},
	}
	if pmo {
		required = append(required,
			struct {
				name string
				ok   bool
			}{"step_id", c.StepID != ""},
			struct {
				name string
				ok   bool
			}{"tool_name", c.ToolName != ""})
	}
	for _, r := range required {
		if !r.ok {
			fail(r.name, "is required")
		}
	}
	if epochSeen && c.TurnEpoch < 0 {
		fail("turn_epoch", "must not be negative")
	}
	if ae != "" && !c.AfterExecution.Valid() {
		fail("after_execution", fmt.Sprintf("%q is not suspend or terminate", ae))
	}
	if c.AgentID != "" {
		if err := card.ValidateName("agent_id", c.AgentID); err != nil {
			fail("agent_id", "must be a subject token (letters, digits, _ and -): it names the wakeup subject")
		}
	}
	if c.ToolCallCardID != "" && !card.ValidID(c.ToolCallCardID) {
		fail("tool_call_card_id", fmt.Sprintf("%q is not a canonical lower-case UUID", c.ToolCallCardID))
	}
	if firstErr != nil {
		firstErr.Partial = c
		firstErr.Routable = c.AgentID != "" && card.ValidateName("agent_id", c.AgentID) == nil &&
			c.AgentTurnID != "" && c.ToolCallID != "" && epochSeen && c.TurnEpoch >= 0 &&
			firstErr.Field != "agent_id" && firstErr.Field != "agent_turn_id" && firstErr.Field != "tool_call_id"
		return nil, firstErr
	}
	return &c, nil
}

func isNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }
