package card

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"unicode/utf8"
)

// Metadata holds the routing and trace fields of a card. Known keys are
// typed fields; any other key is kept in Extra so that cards written by other
// runtimes survive a round trip.
type Metadata struct {
	// AgentID is the agent whose turn produced or consumes the card.
	AgentID string `json:"agent_id,omitempty"`
	// AgentTurnID is the turn the card belongs to; the CardStore indexes it
	// so that a turn's cards can be listed in write order.
	AgentTurnID string `json:"agent_turn_id,omitempty"`
	// TurnEpoch is the turn's epoch when the card was written.
	TurnEpoch int64 `json:"turn_epoch,omitempty"`
	// StepID is the reasoning step within the turn.
	StepID string `json:"step_id,omitempty"`
	// ToolCallID is the tool call the card belongs to.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// TraceID is the W3C trace id (32 hex digits) of the call chain.
	TraceID string `json:"trace_id,omitempty"`
	// ParentStepID is the step that caused this one.
	ParentStepID string `json:"parent_step_id,omitempty"`
	// FunctionName is the tool that produced a tool.result card.
	FunctionName string `json:"function_name,omitempty"`
	// Role is the conversation role seen by an LLM (user, assistant, tool, system).
	Role string `json:"role,omitempty"`
	// Extra holds every other metadata key, as compacted JSON.
	Extra map[string]json.RawMessage `json:"-"`
}

// ExtraTraceparent is the Extra key under which the mesh's admission keeps
// the W3C traceparent of a call's command on its tool.call card, so that
// a wakeup rung from the stored result (a single node's inbox) carries the
// command's traceparent unchanged, as a report's would.
const ExtraTraceparent = "traceparent"

// metadataKnown lists the keys that are typed fields of Metadata.
var metadataKnown = map[string]bool{
	"agent_id": true, "agent_turn_id": true, "turn_epoch": true, "step_id": true,
	"tool_call_id": true, "trace_id": true, "parent_step_id": true,
	"function_name": true, "role": true,
}

type metadataFields Metadata // no methods: avoids recursion in (Un)MarshalJSON

// MarshalJSON writes the typed fields and Extra as one JSON object: the
// typed fields in declaration order, or, with extra keys, every key
// sorted.
func (m Metadata) MarshalJSON() ([]byte, error) {
	return m.appendJSON(nil)
}

// UnmarshalJSON reads the typed fields and keeps every other key in Extra,
// in one pass over data (see decode.go); input the one-pass reader does
// not handle is decoded by unmarshalTwoPass, with the same result.
func (m *Metadata) UnmarshalJSON(data []byte) error {
	r := reader{data: data}
	if r.peek() == 'n' && r.literal("null") && r.end() {
		*m = Metadata{}
		return nil
	}
	r.pos = 0
	if md, ok := parseMetadata(&r, string(data)); ok && r.end() {
		*m = md
		return nil
	}
	return m.unmarshalTwoPass(data)
}

// unmarshalTwoPass decodes metadata with encoding/json: the typed fields,
// then every key into a map for Extra.
func (m *Metadata) unmarshalTwoPass(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*m = Metadata{}
		return nil
	}
	var f metadataFields
	if err := json.Unmarshal(data, &f); err != nil {
		return metadataJSON(err)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return metadataJSON(err)
	}
	*m = Metadata(f)
	for k, v := range all {
		if metadataKnown[k] {
			continue
		}
		if m.Extra == nil {
			m.Extra = make(map[string]json.RawMessage)
		}
		m.Extra[k] = v
	}
	return nil
}

func (m *Metadata) validate() error {
	for _, f := range []struct{ name, v string }{
		{"metadata.agent_id", m.AgentID}, {"metadata.agent_turn_id", m.AgentTurnID},
		{"metadata.step_id", m.StepID}, {"metadata.tool_call_id", m.ToolCallID},
		{"metadata.trace_id", m.TraceID}, {"metadata.parent_step_id", m.ParentStepID},
		{"metadata.function_name", m.FunctionName}, {"metadata.role", m.Role},
	} {
		if err := checkIDLen(f.name, f.v); err != nil {
			return err
		}
	}
	if m.TurnEpoch < 0 {
		return fmt.Errorf("%w: metadata.turn_epoch must not be negative", ErrInvalid)
	}
	ok := true
	for k, v := range m.Extra {
		ok = ok && utf8.ValidString(k) && utf8.Valid(v)
	}
	if ok {
		return nil
	}
	keys := make([]string, 0, len(m.Extra))
	for k := range m.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys) // name the first bad key in order
	for _, k := range keys {
		if err := checkString("a key of metadata", k); err != nil {
			return err
		}
		if err := CheckUTF8("metadata."+k, m.Extra[k]); err != nil {
			return err
		}
	}
	return nil
}
