package inbox

import (
	"encoding/json"
	"fmt"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// ResultReport is the report a stored tool.result card stands for: what
// the worker that wrote it reports (pkg/worker's ResultOf.Report), with
// the report subject's project and channel. A node whose inbox shares the
// CardStore's file stores the entry from it in the result's transaction
// (boltinbox's result hook); the worker's own report then finds it.
type ResultReport struct {
	// ProjectID and ChannelID are the report subject's tokens.
	ProjectID, ChannelID string
	// Report is the report's body.
	Report utp.Report
	// Traceparent continues the call's trace (the card's trace_id) with a
	// span id of its own; a fresh one when the card has no trace id.
	Traceparent string
}

// ReportOfResult builds the report of the tool.result card result for the
// inbox of protocol version version. call is the call's tool.call card:
// the channel is its target_subject's (the command's subject, on which
// the worker reports). The body is the worker's: tool_call_id, agent_id,
// agent_turn_id, turn_epoch and step_id from the result's metadata,
// status and after_execution from its content, tool_name its
// function_name. An error wrapping ErrInvalid says why the card makes no
// report this inbox takes (no call card, a target subject of another
// version or project, a field the inbox would refuse); the worker's own
// report then takes the ordinary way.
func ReportOfResult(version string, result, call *card.Card) (*ResultReport, error) {
	if result == nil || result.Type != card.TypeToolResult {
		return nil, fmt.Errorf("%w: not a tool.result card", ErrInvalid)
	}
	if call == nil {
		return nil, fmt.Errorf("%w: tool.result card %s: the call's tool.call card is not known, so neither is its channel", ErrInvalid, result.CardID)
	}
	var cc card.ToolCallContent
	if err := json.Unmarshal(call.Content, &cc); err != nil {
		return nil, fmt.Errorf("%w: tool.call card %s: content: %v", ErrInvalid, call.CardID, err)
	}
	sub, err := subjects.Parse(cc.TargetSubject)
	if err != nil {
		return nil, fmt.Errorf("%w: tool.call card %s: target_subject: %v", ErrInvalid, call.CardID, err)
	}
	if sub.Version != version || sub.Project != result.ProjectID {
		return nil, fmt.Errorf("%w: tool.call card %s: target_subject %q is not of version %s and project %s",
			ErrInvalid, call.CardID, cc.TargetSubject, version, result.ProjectID)
	}
	tr, err := result.ToolResult()
	if err != nil {
		return nil, fmt.Errorf("%w: tool.result card %s: %v", ErrInvalid, result.CardID, err)
	}
	md := result.Metadata
	rep := utp.Report{
		ToolCallID: result.ToolCallID, AgentTurnID: md.AgentTurnID, TurnEpoch: md.TurnEpoch,
		AgentID: md.AgentID, ToolResultCardID: result.CardID, Status: tr.Status, AfterExecution: tr.AfterExecution,
		StepID: md.StepID, ToolName: md.FunctionName,
	}
	if err := rep.Validate(); err != nil {
		return nil, fmt.Errorf("%w: tool.result card %s: %v", ErrInvalid, result.CardID, err)
	}
	for _, f := range []struct{ name, v string }{
		{"tool_call_id", rep.ToolCallID}, {"agent_turn_id", rep.AgentTurnID},
		{"step_id", rep.StepID}, {"tool_name", rep.ToolName},
	} {
		if len(f.v) > card.MaxIDLen {
			return nil, fmt.Errorf("%w: tool.result card %s: %s is longer than %d bytes", ErrInvalid, result.CardID, f.name, card.MaxIDLen)
		}
	}
	return &ResultReport{ProjectID: result.ProjectID, ChannelID: sub.Channel, Report: rep, Traceparent: traceparentOf(result, call)}, nil
}

// traceparentOf is the traceparent of the report of result: the command's,
// kept on the call card by the admission (card.ExtraTraceparent), when it
// is well-formed and of the result's trace; else the result's trace id
// with a span id of its own; else a fresh one.
func traceparentOf(result, call *card.Card) string {
	id := result.Metadata.TraceID
	var tp string
	if raw, ok := call.Metadata.Extra[card.ExtraTraceparent]; ok && json.Unmarshal(raw, &tp) == nil &&
		utp.ValidTraceparent(tp) && (id == "" || utp.TraceID(tp) == id) {
		return tp
	}
	tp = utp.NewTraceparent()
	if utp.TraceID("00-"+id+"-0000000000000001-01") == id && id != "" {
		tp = "00-" + id + tp[len("00-")+32:]
	}
	return tp
}
