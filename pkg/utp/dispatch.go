package utp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// The wire bodies of the mesh's admission service (docs/protocol.md,
// "Admission"): an agent runtime sends a DispatchRequest on
// cg.<ver>.<project>.<channel>.svc.dispatch.call.<agent> (an operator on
// …svc.dispatch.operator.<name>) and gets a DispatchReply; a worker reads
// the mesh's admission public keys with a request on …svc.dispatch.keys
// and gets an AdmissionKeysReply.

// MsgTypeToolCall is the CG-Msg-Type header of a tool command.
const MsgTypeToolCall = "tool_call"

// HeaderMandate carries, on an admitted command only, the mandate the mesh
// verified for the call: it travels to the tool's own workers (who alone
// may consume the command) and is never written to a card, which every
// worker may read; the card keeps its SHA-256 (metadata.mandate_sha256).
// Tools that evaluate the caller's mandate themselves read it as
// worker.Call.Mandate.
const HeaderMandate = "CG-Mandate"

// ErrDispatch is wrapped by every error of DispatchRequest.Check: the
// request breaks a rule; the message names the field.
var ErrDispatch = errors.New("utp: invalid dispatch request")

// DispatchRequest asks the mesh to admit and dispatch one tool call.
type DispatchRequest struct {
	// AgentID is the agent making the call; on the agent subject it must
	// equal the subject's last token (subjects.ToolToken of it). On the
	// operator subject it names the agent whose inbox gets the result.
	AgentID     string `json:"agent_id"`
	AgentTurnID string `json:"agent_turn_id"`
	TurnEpoch   int64  `json:"turn_epoch"`
	StepID      string `json:"step_id"`
	// ParentStepID is optional.
	ParentStepID string `json:"parent_step_id,omitempty"`
	ToolCallID   string `json:"tool_call_id"`
	ToolName     string `json:"tool_name"`
	// Arguments is a JSON object; absent or null means {}.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// AfterExecution overrides the registry entry's; optional.
	AfterExecution card.AfterExecution `json:"after_execution,omitempty"`
	// Traceparent is the W3C trace context; required.
	Traceparent string `json:"traceparent"`
	// Mandate is the signed mandate (compact JWS). It travels only in
	// this request: the mesh verifies it and never stores it in a card.
	Mandate string `json:"mandate,omitempty"`
	// Metadata are extra keys of the tool.call card's metadata, each a
	// JSON value; the typed keys and the admission's are refused.
	Metadata map[string]json.RawMessage `json:"metadata,omitempty"`
	// CreatedAt is the tool.call card's created_at; zero means now.
	CreatedAt time.Time `json:"created_at,omitzero"`
}

// DispatchReply is the admission service's answer. Admitted false means
// the call was refused: its tool.call card and a failed auth_failed
// tool.result were written and reported to the inbox (the agent is woken
// as for any result), and Error says why.
type DispatchReply struct {
	Admitted       bool                `json:"admitted"`
	ToolCallID     string              `json:"tool_call_id"`
	ToolCallCardID string              `json:"tool_call_card_id"`
	StepID         string              `json:"step_id"`
	TargetSubject  string              `json:"target_subject"`
	AfterExecution card.AfterExecution `json:"after_execution"`
	Traceparent    string              `json:"traceparent"`
	// Error is the denial (code auth_failed) when Admitted is false.
	Error *card.Error `json:"error,omitempty"`
}

// AdmissionKey is one mesh admission public key.
type AdmissionKey struct {
	// KeyID is mandate.KeyID of the key.
	KeyID string `json:"kid"`
	// PublicKey is the Ed25519 public key, base64url without padding.
	PublicKey string `json:"public_key"`
}

// AdmissionKeysReply answers svc.dispatch.keys: every key of the mesh's
// nodes and the project's commands mode ("admitted", or "raw" when the
// project accepts raw commands; see authz.ProjectConfig).
type AdmissionKeysReply struct {
	Keys     []AdmissionKey `json:"keys"`
	Commands string         `json:"commands"`
}

// TypedMetadata are the tool.call metadata keys the dispatcher writes
// itself; DispatchRequest.Metadata may not set them.
var TypedMetadata = map[string]bool{"agent_id": true, "agent_turn_id": true, "turn_epoch": true, "step_id": true,
	"tool_call_id": true, "trace_id": true, "parent_step_id": true, "function_name": true, "role": true,
	"mandate": true, "mandate_jti": true, "mandate_sha256": true, "admission": true, card.ExtraTraceparent: true}

// Check validates r as the admission service does and returns its
// arguments in canonical form ({} for none). The error wraps ErrDispatch
// and names the field and what to send instead.
func (r *DispatchRequest) Check() (json.RawMessage, error) {
	for _, f := range []struct {
		name, v  string
		required bool
	}{
		{"agent_id", r.AgentID, true}, {"tool_name", r.ToolName, true}, {"agent_turn_id", r.AgentTurnID, true},
		{"tool_call_id", r.ToolCallID, true}, {"step_id", r.StepID, true}, {"parent_step_id", r.ParentStepID, false},
	} {
		if err := CheckID(f.name, f.v, f.required); err != nil {
			return nil, err
		}
	}
	if r.TurnEpoch < 0 {
		return nil, fmt.Errorf("%w: turn_epoch %d is negative", ErrDispatch, r.TurnEpoch)
	}
	if r.AfterExecution != "" && !r.AfterExecution.Valid() {
		return nil, fmt.Errorf("%w: after_execution %q is not suspend or terminate", ErrDispatch, r.AfterExecution)
	}
	if TraceID(r.Traceparent) == "" {
		return nil, fmt.Errorf("%w: traceparent %q is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)", ErrDispatch, r.Traceparent)
	}
	args := bytes.TrimSpace(r.Arguments)
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		args = []byte("{}")
	}
	if args[0] != '{' || !json.Valid(args) {
		return nil, fmt.Errorf("%w: arguments of tool %s must be a JSON object", ErrDispatch, r.ToolName)
	}
	for k, v := range r.Metadata {
		if TypedMetadata[k] {
			return nil, fmt.Errorf("%w: metadata key %q is written by the mesh; use another key", ErrDispatch, k)
		}
		if !json.Valid(v) {
			return nil, fmt.Errorf("%w: metadata %q is not valid JSON", ErrDispatch, k)
		}
	}
	return args, nil
}

// CheckID checks one id field of a call: present when required, at most
// card.MaxIDLen bytes, no control characters. Errors wrap ErrDispatch.
func CheckID(field, v string, required bool) error {
	if v == "" {
		if required {
			return fmt.Errorf("%w: %s is required", ErrDispatch, field)
		}
		return nil
	}
	if len(v) > card.MaxIDLen {
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrDispatch, field, card.MaxIDLen)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] == 0x7f {
			return fmt.Errorf("%w: %s %q contains a control character at byte %d", ErrDispatch, field, v, i)
		}
	}
	return nil
}
