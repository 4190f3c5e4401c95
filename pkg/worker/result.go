package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// ResultOf names the call a tool.result card answers and who answers it.
// It is the one builder of a call's result card and of its report: the
// runtime, the unrouted sweeper, RequestCancel and catalogue services that
// resolve calls later (ATP's HEM) all use it, so the card's metadata, the
// report's body and headers and its message id are the same everywhere
// (docs/protocol.md §7, §8.1).
type ResultOf struct {
	// Version, ProjectID and ChannelID are the command's subject tokens.
	Version, ProjectID, ChannelID string
	// AgentID, AgentTurnID, TurnEpoch and ToolCallID name the call.
	AgentID     string
	AgentTurnID string
	TurnEpoch   int64
	ToolCallID  string
	// StepID is the command's step_id (CG-Step-Id); the card's step_id
	// comes from the tool.call card when it has one.
	StepID string
	// ToolName is the card's function_name and the report's tool_name.
	ToolName string
	// AuthorID is the card's author_id: "tool.<name>" for a tool,
	// "mesh.unrouted", "pmo.cancel_tool_call", a service's name.
	AuthorID string
	// Traceparent, Tracestate and RecursionDepth are the command's
	// headers, passed on to the report; the trace id goes to the card.
	Traceparent, Tracestate, RecursionDepth string
}

// Card builds the tool.result card of the call with content: routing
// metadata from r; step_id, trace_id and parent_step_id copied from the
// tool.call card callCard when given (and set).
func (r ResultOf) Card(content card.ToolResultContent, callCard *card.Card) (*card.Card, error) {
	raw, err := json.Marshal(content)
	if err != nil {
		return nil, fmt.Errorf("worker: encode tool result: %w", err)
	}
	md := card.Metadata{
		AgentID: r.AgentID, AgentTurnID: r.AgentTurnID, TurnEpoch: r.TurnEpoch,
		StepID: r.StepID, ToolCallID: r.ToolCallID, FunctionName: r.ToolName, Role: "tool",
		TraceID: utp.TraceID(r.Traceparent),
	}
	if callCard != nil {
		if callCard.Metadata.StepID != "" {
			md.StepID = callCard.Metadata.StepID
		}
		if callCard.Metadata.TraceID != "" {
			md.TraceID = callCard.Metadata.TraceID
		}
		md.ParentStepID = callCard.Metadata.ParentStepID
	}
	return &card.Card{
		CardID: card.NewID(), ProjectID: r.ProjectID, Type: card.TypeToolResult,
		AuthorID: r.AuthorID, Content: raw, Metadata: md,
		ToolCallID: r.ToolCallID, CreatedAt: time.Now().UTC(),
	}, nil
}

// ResultStore is what WriteResult needs of a CardStore.
type ResultStore interface {
	Put(ctx context.Context, cards ...*card.Card) error
	FindToolResult(ctx context.Context, projectID, agentTurnID, toolCallID string) (*card.Card, error)
}

var _ ResultStore = cardstore.Store(nil)

// WriteResult stores the result card rc. When the call already has a
// result (cardstore.ErrResultExists), it returns that card instead and
// existed true: a call has exactly one result. Other errors of the
// store are returned as they are (cardstore.ErrTooLarge, say).
func WriteResult(ctx context.Context, st ResultStore, rc *card.Card) (res *card.Card, existed bool, err error) {
	res, existed, _, err = writeResult(ctx, st, rc)
	return res, existed, err
}

// writeResult is WriteResult that also says whether the store stored the
// call's inbox entry with the new result (cardstore.EntryPutter): the
// worker then needs not report it.
func writeResult(ctx context.Context, st ResultStore, rc *card.Card) (res *card.Card, existed, entry bool, err error) {
	if ep, ok := st.(cardstore.EntryPutter); ok {
		entry, err = ep.PutWithEntry(ctx, rc)
	} else {
		err = st.Put(ctx, rc)
	}
	if errors.Is(err, cardstore.ErrResultExists) {
		existing, ferr := st.FindToolResult(ctx, rc.ProjectID, rc.Metadata.AgentTurnID, rc.ToolCallID)
		if ferr != nil {
			return nil, true, false, fmt.Errorf("worker: read the existing result: %w", ferr)
		}
		return existing, true, false, nil
	}
	if err != nil {
		return nil, false, false, err
	}
	return rc, false, entry, nil
}

// Report builds the report of result card rc to the inbox, on
// cg.<ver>.<project>.<channel>.cmd.sys.inbox.report: the body from the
// card (its status, after_execution and step_id) and r (tool_name: r's,
// else the card's function_name), and the headers docs/protocol.md §8.1
// lists, but Nats-Msg-Id, which only the stream way carries (ReportMsgID).
func (r ResultOf) Report(rc *card.Card) (*nats.Msg, error) {
	tr, err := rc.ToolResult()
	if err != nil {
		return nil, fmt.Errorf("worker: result card %s: %w", rc.CardID, err)
	}
	tool := r.ToolName
	if tool == "" {
		tool = rc.Metadata.FunctionName
	}
	rep := utp.Report{
		ToolCallID: r.ToolCallID, AgentTurnID: r.AgentTurnID, TurnEpoch: r.TurnEpoch,
		AgentID: r.AgentID, ToolResultCardID: rc.CardID, Status: tr.Status, AfterExecution: tr.AfterExecution,
		StepID: rc.Metadata.StepID, ToolName: tool,
	}
	subj, err := subjects.InboxReport(r.Version, r.ProjectID, r.ChannelID)
	if err != nil {
		return nil, fmt.Errorf("worker: report subject: %w", err)
	}
	m := nats.NewMsg(subj.String())
	if m.Data, err = json.Marshal(rep); err != nil {
		return nil, fmt.Errorf("worker: encode report: %w", err)
	}
	h := m.Header
	if r.Traceparent != "" {
		h.Set(utp.HeaderTraceparent, r.Traceparent)
	}
	if r.Tracestate != "" {
		h.Set(utp.HeaderTracestate, r.Tracestate)
	}
	utp.CallHeaders{ProjectID: r.ProjectID, ChannelID: r.ChannelID, AgentID: r.AgentID, AgentTurnID: r.AgentTurnID,
		TurnEpoch: r.TurnEpoch, ToolCallID: r.ToolCallID, StepID: r.StepID}.Set(h)
	if r.RecursionDepth != "" {
		h.Set(utp.HeaderRecursionDepth, r.RecursionDepth)
	}
	return m, nil
}

// ReportMsgID is the JetStream message id (Nats-Msg-Id) of the report of
// result card resultCardID on the stream way: report-<id>, so the stream
// drops a repeated report within its duplicate window.
func ReportMsgID(resultCardID string) string { return "report-" + resultCardID }
