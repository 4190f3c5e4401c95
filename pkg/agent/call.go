package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// Values the Client writes on what it produces.
const (
	// RoleAssistant is the metadata.role of the tool.call cards.
	RoleAssistant = "assistant"
	// MsgTypeToolCall is the CG-Msg-Type header of a tool command.
	MsgTypeToolCall = "tool_call"
)

// CallRequest is one tool call.
type CallRequest struct {
	// ToolName is the registry name of the tool. Required.
	ToolName string
	// Arguments are the call's parameters, a JSON object; nil means {}.
	Arguments json.RawMessage
	// AgentTurnID is the turn making the call. Required.
	AgentTurnID string
	// TurnEpoch is the turn's current epoch (≥ 0).
	TurnEpoch int64
	// StepID is the reasoning step; default a new UUIDv7. Calls of one step
	// (parallel tool calls) should share it.
	StepID string
	// ParentStepID is the step that caused this one (optional).
	ParentStepID string
	// ToolCallID identifies the call within the turn; default card.NewID().
	// Reusing the id of an earlier call of the turn is idempotent: the
	// worker answers with the existing result.
	ToolCallID string
	// AfterExecution overrides the registry entry's after_execution.
	AfterExecution card.AfterExecution
	// Traceparent is the W3C trace context of the call; default the one in
	// ctx (ContextWithTraceparent), else a new one.
	Traceparent string
	// Mandate is the signed mandate (compact JWS) that authorizes the
	// call; default Config.Mandate. It travels only in the dispatch
	// request, where the mesh's admission verifies it; the tool.call card
	// keeps its jti and SHA-256. With Config.RawCommands it travels in the
	// card's metadata under MetadataMandate, where the worker's gate reads
	// it.
	Mandate string
	// Metadata are extra keys of the tool.call card's metadata (e.g. the
	// MCP bridge's "mcp": request id and session), each a JSON value. A key
	// that names a typed metadata field or MetadataMandate is refused with
	// ErrInvalid.
	Metadata map[string]json.RawMessage
	// CreatedAt is the tool.call card's created_at; default now. Replay
	// sets it to the original call's time so that tools deriving ids and
	// timestamps from the call reproduce their results.
	CreatedAt time.Time
}

// MetadataMandate is the tool.call card metadata key that carries the
// call's mandate token (a JSON string).
const MetadataMandate = "mandate"

// typedMetadata are the metadata keys the Client writes itself (typed
// fields of card.Metadata); CallRequest.Metadata may not set them.
var typedMetadata = map[string]bool{"agent_id": true, "agent_turn_id": true, "turn_epoch": true, "step_id": true,
	"tool_call_id": true, "trace_id": true, "parent_step_id": true, "function_name": true, "role": true}

// Pending identifies a dispatched call: what a runtime that parks the turn
// keeps to match the wakeup later.
type Pending struct {
	AgentTurnID    string
	TurnEpoch      int64
	StepID         string
	ToolCallID     string
	ToolCallCardID string
	ToolName       string
	// TargetSubject is the subject the command was published on.
	TargetSubject string
	// AfterExecution is the value the command carried.
	AfterExecution card.AfterExecution
	// Traceparent is the command's trace context.
	Traceparent string
}

// Outcome is the result of a Call.
type Outcome struct {
	// Call identifies the call.
	Call Pending
	// Wakeup is the inbox's wakeup (or the equivalent inbox entry, when the
	// result was found by reading the inbox).
	Wakeup utp.Wakeup
	// ResultCard is the tool.result card.
	ResultCard *card.Card
	// Result is its content.
	Result *card.ToolResultContent
	// AfterExecution is the effective after_execution: the result's
	// __cg_control.after_execution when present and valid, else the one
	// the result card records.
	AfterExecution card.AfterExecution
}

// PendingError is returned by Call when ctx ends before the result
// arrives. The call was dispatched and goes on: its result will reach the
// inbox, where Resume finds it. It unwraps to ctx's error.
type PendingError struct {
	Pending Pending
	Err     error
}

// Error names the pending call.
func (e *PendingError) Error() string {
	p := e.Pending
	return fmt.Sprintf("agent: tool call %s (tool %s, turn %s, tool_call_card_id %s) still pending: %v",
		p.ToolCallID, p.ToolName, p.AgentTurnID, p.ToolCallCardID, e.Err)
}

// Unwrap returns the context error.
func (e *PendingError) Unwrap() error { return e.Err }

// Call makes one tool call and waits for its result: it dispatches the
// call through the mesh's admission service (which authorizes it, writes
// the tool.call card and publishes the command), waits for the wakeup,
// reads the tool.result card and acknowledges the inbox entry. See the
// package doc for the message flow. A failed tool is not an error: its
// Outcome has Result.Status failed (or timeout, canceled) and Result.Error.
//
// When ctx ends first, Call returns a *PendingError wrapping ctx's error;
// without a deadline it waits as long as the tool runs. When the result is
// read but the inbox entry cannot be acknowledged, Call returns the Outcome
// together with an error matching ErrNotAcked.
func (c *Client) Call(ctx context.Context, req CallRequest) (*Outcome, error) {
	p, err := c.prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	// Subscribe and register before publishing: a wakeup published after
	// the command cannot pass us by.
	if err := c.ensureSub(ctx); err != nil {
		return nil, err
	}
	key := callKey(p.pending.AgentTurnID, p.pending.ToolCallID)
	w := c.register(key)
	defer c.unregister(key, w)
	if err := c.send(ctx, p); err != nil {
		return nil, err
	}
	wk, err := c.await(ctx, p.pending, w, !p.freshID)
	if err != nil {
		return nil, err
	}
	return c.finish(ctx, p.pending, wk)
}

// CallInto is Call for a caller that wants the result's value: it decodes
// a successful result (the JSON value the tool returned) into v. A result
// of another status is an error wrapping ErrToolFailed; a result that does
// not decode into v is an error wrapping ErrNoResult. The Outcome is
// returned whenever the call ended.
func (c *Client) CallInto(ctx context.Context, req CallRequest, v any) (*Outcome, error) {
	out, err := c.Call(ctx, req)
	if err != nil {
		return out, err
	}
	if out.Result == nil {
		return out, fmt.Errorf("%w: %s has no result content", ErrNoResult, req.ToolName)
	}
	if r := out.Result; r.Status != card.StatusSuccess {
		msg := string(r.Status)
		if r.Error != nil {
			msg += fmt.Sprintf(" (%s: %s)", r.Error.Code, r.Error.Message)
		}
		return out, fmt.Errorf("%w: %s ended %s", ErrToolFailed, req.ToolName, msg)
	}
	if err := json.Unmarshal(out.Result.Result, v); err != nil {
		return out, fmt.Errorf("%w: the result of %s does not decode: %v", ErrNoResult, req.ToolName, err)
	}
	return out, nil
}

// Dispatch dispatches the call through the mesh (see Call), then returns
// without waiting: the result arrives as a wakeup (see Wakeups)
// and an inbox entry (see Resume).
func (c *Client) Dispatch(ctx context.Context, req CallRequest) (*Pending, error) {
	p, err := c.prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := c.send(ctx, p); err != nil {
		return nil, err
	}
	pd := p.pending
	return &pd, nil
}

// prepared is a validated call, ready to send: a dispatch request, or
// (Config.RawCommands) a card and a command.
type prepared struct {
	pending  Pending
	dispatch *utp.DispatchRequest
	card     *card.Card
	// freshID: the client made the tool_call_id, so no result of it can
	// exist before the command is sent.
	freshID bool
}

// prepare validates req, looks the tool up and builds the tool.call card.
func (c *Client) prepare(ctx context.Context, req CallRequest) (*prepared, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	if req.ToolName == "" {
		return nil, fmt.Errorf("%w: tool_name is required", ErrInvalid)
	}
	freshID := req.ToolCallID == ""
	if freshID {
		req.ToolCallID = card.NewID()
	}
	if req.StepID == "" {
		req.StepID = card.NewID()
	}
	for _, f := range []struct {
		name, v  string
		required bool
	}{
		{"tool_name", req.ToolName, true}, {"agent_turn_id", req.AgentTurnID, true},
		{"tool_call_id", req.ToolCallID, true}, {"step_id", req.StepID, true},
		{"parent_step_id", req.ParentStepID, false},
	} {
		if err := checkID(f.name, f.v, f.required); err != nil {
			return nil, err
		}
	}
	if req.TurnEpoch < 0 {
		return nil, fmt.Errorf("%w: turn_epoch %d is negative", ErrInvalid, req.TurnEpoch)
	}
	if req.AfterExecution != "" && !req.AfterExecution.Valid() {
		return nil, fmt.Errorf("%w: after_execution %q is not suspend or terminate", ErrInvalid, req.AfterExecution)
	}
	args := bytes.TrimSpace(req.Arguments)
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		args = []byte("{}")
	}
	if args[0] != '{' || !json.Valid(args) {
		return nil, fmt.Errorf("%w: arguments of tool %s must be a JSON object", ErrInvalid, req.ToolName)
	}
	tp := req.Traceparent
	if tp == "" {
		tp = TraceparentFromContext(ctx)
	}
	if tp == "" {
		tp = utp.NewTraceparent()
	} else if utp.TraceID(tp) == "" {
		return nil, fmt.Errorf("%w: traceparent %q is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)", ErrInvalid, tp)
	}

	mandate := req.Mandate
	if mandate == "" {
		mandate = c.mandate
	}
	if c.operator != "" && mandate != "" {
		return nil, fmt.Errorf("%w: the operator %s's calls carry no mandate; drop CallRequest.Mandate", ErrInvalid, c.operator)
	}
	if !c.raw {
		for k, v := range req.Metadata {
			if k == MetadataMandate || utp.TypedMetadata[k] {
				return nil, fmt.Errorf("%w: metadata key %q is written by the client; use another key", ErrInvalid, k)
			}
			if !json.Valid(v) {
				return nil, fmt.Errorf("%w: metadata %q is not valid JSON", ErrInvalid, k)
			}
		}
		dr := &utp.DispatchRequest{
			AgentID: c.agentID, AgentTurnID: req.AgentTurnID, TurnEpoch: req.TurnEpoch, StepID: req.StepID,
			ParentStepID: req.ParentStepID, ToolCallID: req.ToolCallID, ToolName: req.ToolName, Arguments: args,
			AfterExecution: req.AfterExecution, Traceparent: tp, Mandate: mandate, Metadata: req.Metadata, CreatedAt: req.CreatedAt,
		}
		return &prepared{dispatch: dr, freshID: freshID, pending: Pending{
			AgentTurnID: req.AgentTurnID, TurnEpoch: req.TurnEpoch, StepID: req.StepID,
			ToolCallID: req.ToolCallID, ToolName: req.ToolName, AfterExecution: req.AfterExecution, Traceparent: tp,
		}}, nil
	}

	var ent *registry.Entry
	var err error
	if registry.IsReserved(req.ToolName) {
		// PMO built-ins are not stored in the registry; their subject is fixed.
		ent = &registry.Entry{ToolName: req.ToolName, AfterExecution: card.Suspend,
			TargetSubject: "cg.{ver}.{project_id}.{channel_id}.cmd.sys.pmo.internal." + strings.ToLower(req.ToolName)}
	} else {
		ent, err = c.entries.get(ctx, c.reg, c.project, req.ToolName)
	}
	if errors.Is(err, registry.ErrNotFound) {
		return nil, fmt.Errorf("%w: tool %q is not registered in project %q", ErrUnknownTool, req.ToolName, c.project)
	}
	if err != nil {
		return nil, fmt.Errorf("agent: look up tool %q in project %q: %w", req.ToolName, c.project, err)
	}
	tmpl, err := subjects.ParseTemplate(ent.TargetSubject)
	if err != nil {
		return nil, fmt.Errorf("agent: tool %q: target_subject: %w", req.ToolName, err)
	}
	subj, err := tmpl.Render(c.ver, c.project, c.channel)
	if err != nil {
		return nil, fmt.Errorf("agent: tool %q: render target_subject for %s/%s/%s: %w", req.ToolName, c.ver, c.project, c.channel, err)
	}
	ae := req.AfterExecution
	if ae == "" {
		ae = ent.AfterExecution
	}
	if !ae.Valid() {
		ae = card.Suspend
	}
	content, err := json.Marshal(card.ToolCallContent{ToolName: req.ToolName, Arguments: args, TargetSubject: subj.String()})
	if err != nil {
		return nil, fmt.Errorf("agent: encode tool.call content: %w", err)
	}
	created := req.CreatedAt.UTC()
	if req.CreatedAt.IsZero() {
		created = time.Now().UTC()
	}
	cc := &card.Card{
		CardID: card.NewID(), ProjectID: c.project, Type: card.TypeToolCall, AuthorID: c.agentID,
		Content: content, ToolCallID: req.ToolCallID, CreatedAt: created,
		Metadata: card.Metadata{
			AgentID: c.agentID, AgentTurnID: req.AgentTurnID, TurnEpoch: req.TurnEpoch,
			StepID: req.StepID, ToolCallID: req.ToolCallID, TraceID: utp.TraceID(tp),
			ParentStepID: req.ParentStepID, Role: RoleAssistant,
		},
	}
	if mandate != "" {
		raw, _ := json.Marshal(mandate)
		cc.Metadata.Extra = map[string]json.RawMessage{MetadataMandate: raw}
	}
	for k, v := range req.Metadata {
		if k == MetadataMandate || typedMetadata[k] {
			return nil, fmt.Errorf("%w: metadata key %q is written by the client; use another key", ErrInvalid, k)
		}
		if !json.Valid(v) {
			return nil, fmt.Errorf("%w: metadata %q is not valid JSON", ErrInvalid, k)
		}
		if cc.Metadata.Extra == nil {
			cc.Metadata.Extra = map[string]json.RawMessage{}
		}
		cc.Metadata.Extra[k] = v
	}
	if err := cc.Validate(); err != nil {
		return nil, fmt.Errorf("%w: tool.call card: %v", ErrInvalid, err)
	}
	return &prepared{card: cc, freshID: freshID, pending: Pending{
		AgentTurnID: req.AgentTurnID, TurnEpoch: req.TurnEpoch, StepID: req.StepID,
		ToolCallID: req.ToolCallID, ToolCallCardID: cc.CardID, ToolName: req.ToolName,
		TargetSubject: subj.String(), AfterExecution: ae, Traceparent: tp,
	}}, nil
}

// dispatchCodes map the admission service's error codes to the client's
// sentinels.
var dispatchCodes = svc.Codes{
	{Err: ErrInvalid, Code: svc.CodeBadRequest},
	{Err: ErrInvalid, Code: svc.CodeForbidden},
	{Err: ErrUnknownTool, Code: svc.CodeNotFound},
	{Err: ErrInvalid, Code: svc.CodeConflict},
}

// send hands the call to the mesh: one request to the admission service,
// which authorizes it, writes the tool.call card and publishes the
// command; p.pending gets the card id, target subject and after_execution
// it answers. A refused call is not an error: its auth_failed result
// reaches the inbox like any other. With Config.RawCommands, sendRaw.
func (c *Client) send(ctx context.Context, p *prepared) error {
	if p.dispatch == nil {
		return c.sendRaw(ctx, p)
	}
	var reply utp.DispatchReply
	// The admission is idempotent per tool_call_id (protocol §5.7), so a
	// dispatch whose answering node died is sent again after an attempt.
	if err := svc.CallResent(ctx, c.nc, c.dispatch, dispatchCodes, p.dispatch, &reply); err != nil {
		if errors.Is(err, svc.ErrUnavailable) {
			return fmt.Errorf("agent: dispatch tool_call_id %s (tool %s): %w (the mesh's admission service answers on svc.dispatch; is the mesh running, and new enough?)",
				p.dispatch.ToolCallID, p.dispatch.ToolName, err)
		}
		return fmt.Errorf("agent: dispatch tool_call_id %s (tool %s) in project %s: %w", p.dispatch.ToolCallID, p.dispatch.ToolName, c.project, err)
	}
	if reply.ToolCallCardID == "" || reply.TargetSubject == "" {
		return fmt.Errorf("%w: dispatch reply of tool_call_id %s names no tool.call card or target subject", svc.ErrBadReply, p.dispatch.ToolCallID)
	}
	pd := &p.pending
	pd.ToolCallCardID, pd.TargetSubject, pd.AfterExecution = reply.ToolCallCardID, reply.TargetSubject, reply.AfterExecution
	if reply.StepID != "" {
		pd.StepID = reply.StepID
	}
	if !reply.Admitted {
		msg := ""
		if reply.Error != nil {
			msg = reply.Error.Message
		}
		c.log.Info("agent: the mesh refused the call; its auth_failed result goes to the inbox", "tool_name", pd.ToolName,
			"tool_call_id", pd.ToolCallID, "error", msg)
		return nil
	}
	c.log.Debug("agent: call dispatched", "tool_name", pd.ToolName, "agent_turn_id", pd.AgentTurnID,
		"tool_call_id", pd.ToolCallID, "subject", pd.TargetSubject)
	return nil
}

// sendRaw writes the tool.call card, then publishes the command with
// JetStream and waits for the PubAck (Config.RawCommands).
func (c *Client) sendRaw(ctx context.Context, p *prepared) error {
	pd := p.pending
	if err := c.store.Put(ctx, p.card); err != nil {
		return fmt.Errorf("agent: write tool.call card %s of tool_call_id %s: %w", p.card.CardID, pd.ToolCallID, err)
	}
	now := time.Now().UTC()
	body, err := json.Marshal(utp.Command{
		AgentID: c.agentID, AgentTurnID: pd.AgentTurnID, TurnEpoch: pd.TurnEpoch, ToolCallID: pd.ToolCallID,
		AfterExecution: pd.AfterExecution, ToolCallCardID: pd.ToolCallCardID, StepID: pd.StepID,
		ToolName: pd.ToolName, DispatchRequestedAt: &now,
	})
	if err != nil {
		return fmt.Errorf("agent: encode command: %w", err)
	}
	m := nats.NewMsg(pd.TargetSubject)
	m.Data = body
	h := m.Header
	h.Set(utp.HeaderTraceparent, pd.Traceparent)
	h.Set(jetstream.MsgIDHeader, utp.Ref(c.project, pd.AgentTurnID, pd.ToolCallID).MsgID())
	utp.CallHeaders{ProjectID: c.project, ChannelID: c.channel, AgentID: c.agentID, AgentTurnID: pd.AgentTurnID,
		TurnEpoch: pd.TurnEpoch, ToolCallID: pd.ToolCallID, StepID: pd.StepID}.Set(h)
	h.Set(utp.HeaderMsgType, MsgTypeToolCall)
	h.Set(utp.HeaderVersion, c.ver)
	h.Set(utp.HeaderSender, c.agentID)
	h.Set(utp.HeaderTimestamp, now.Format(time.RFC3339Nano))
	ack, err := c.js.PublishMsg(ctx, m)
	if err != nil {
		return fmt.Errorf("agent: publish command of tool_call_id %s on %s (tool.call card %s is written; retrying with the same tool_call_id is safe): %w",
			pd.ToolCallID, pd.TargetSubject, pd.ToolCallCardID, err)
	}
	if ack.Duplicate {
		c.log.Info("agent: command was a duplicate within the stream's window; JetStream kept the first one",
			"tool_call_id", pd.ToolCallID, "agent_turn_id", pd.AgentTurnID, "subject", pd.TargetSubject)
	}
	c.log.Debug("agent: command published", "tool_name", pd.ToolName, "agent_turn_id", pd.AgentTurnID,
		"tool_call_id", pd.ToolCallID, "subject", pd.TargetSubject)
	return nil
}

// await waits for the call's wakeup. When checkFirst is set (a
// tool_call_id the caller chose, which may have a result already) it
// first reads the inbox; then it waits on the subscription, re-reading the
// inbox every PollInterval (a wakeup that a reconnect swallowed). A call
// with a fresh id needs no first read: the waiter was registered before
// the command was sent, so its wakeup cannot pass by.
//
// A re-made call (checkFirst) accepts an entry in any state, at the first
// read and at every poll: its command may be a duplicate JetStream drops
// and its result an entry that wakes no one — acked long ago, or stale
// because it was reported at the epoch before a restart while this call
// is made at the new one. A first read that failed is made good by the
// polls for the same reason.
func (c *Client) await(ctx context.Context, pd Pending, w *waiter, checkFirst bool) (utp.Wakeup, error) {
	poll := inbox.StatePending
	if checkFirst {
		poll = inbox.StateAll
		if wk, ok := c.checkInboxState(ctx, pd, poll); ok {
			return wk, nil
		}
	}
	var tick <-chan time.Time
	if c.poll > 0 {
		t := time.NewTicker(c.poll)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case wk := <-w.ch:
			return wk, nil
		case <-tick:
			if wk, ok := c.checkInboxState(ctx, pd, poll); ok {
				return wk, nil
			}
		case <-ctx.Done():
			return utp.Wakeup{}, &PendingError{Pending: pd, Err: ctx.Err()}
		case <-c.done:
			return utp.Wakeup{}, &PendingError{Pending: pd, Err: ErrClosed}
		}
	}
}

// checkInboxState looks for the call's inbox entry in state st. Errors
// are logged and treated as "not yet": the subscription and the next poll
// go on.
func (c *Client) checkInboxState(ctx context.Context, pd Pending, st inbox.State) (utp.Wakeup, bool) {
	entries, err := c.callEntries(ctx, pd.AgentTurnID, pd.ToolCallID, st)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("agent: cannot read the inbox while waiting for a result; still waiting", "tool_call_id", pd.ToolCallID, "err", err)
		}
		return utp.Wakeup{}, false
	}
	for i := range entries {
		if entries[i].ToolCallID == pd.ToolCallID {
			return entryWakeup(&entries[i]), true
		}
	}
	return utp.Wakeup{}, false
}

// turnEntries lists the agent's inbox entries of a turn in state st,
// following pages.
func (c *Client) turnEntries(ctx context.Context, turn string, st inbox.State) ([]inbox.Entry, error) {
	return c.callEntries(ctx, turn, "", st)
}

// callEntries lists the agent's inbox entries of a turn in state st, of
// one call when call is not "" (the inbox looks the call up instead of
// reading the turn; an inbox from before tool_call_id in a list returns
// the turn, which checkInboxState filters), following pages.
func (c *Client) callEntries(ctx context.Context, turn, call string, st inbox.State) ([]inbox.Entry, error) {
	var out []inbox.Entry
	q := inbox.ListQuery{AgentID: c.agentID, AgentTurnID: turn, ToolCallID: call, State: st, Limit: inbox.MaxList}
	for {
		page, err := c.inbox.List(ctx, c.project, q)
		if err != nil {
			return out, fmt.Errorf("agent: inbox list %s entries of turn %s: %w", st, turn, err)
		}
		out = append(out, page...)
		if len(page) < inbox.MaxList {
			return out, nil
		}
		q.After = page[len(page)-1].InboxID
	}
}

func entryWakeup(e *inbox.Entry) utp.Wakeup {
	return utp.Wakeup{
		AgentID: e.AgentID, InboxID: e.InboxID, Reason: utp.ReasonToolResult,
		AgentTurnID: e.AgentTurnID, TurnEpoch: e.TurnEpoch, ToolCallID: e.ToolCallID,
		ToolResultCardID: e.ToolResultCardID, Status: e.Status, AfterExecution: e.AfterExecution,
		StepID: e.StepID,
	}
}

// finish reads the result card the wakeup points at (or takes the one it
// carries) and acknowledges the inbox entry.
func (c *Client) finish(ctx context.Context, pd Pending, wk utp.Wakeup) (*Outcome, error) {
	rc, tr, err := c.carriedResult(pd.AgentTurnID, pd.ToolCallID, wk)
	if err != nil {
		c.log.Debug("agent: the wakeup's result card is unusable; reading it", "tool_call_id", pd.ToolCallID, "err", err)
	}
	if rc == nil {
		if rc, tr, err = c.readResult(ctx, pd.AgentTurnID, pd.ToolCallID, wk.ToolResultCardID); err != nil {
			return nil, err
		}
	}
	out := &Outcome{
		Call: pd, Wakeup: wk, ResultCard: rc, Result: tr,
		AfterExecution: card.EffectiveAfterExecution(tr.Result, tr.AfterExecution),
	}
	if wk.InboxID == "" {
		return out, fmt.Errorf("%w: the wakeup of tool_call_id %s has no inbox_id", ErrNotAcked, pd.ToolCallID)
	}
	// A lazy ack: the result is read, and an ack lost to an inbox crash
	// only makes a resuming runtime see this result again, which it
	// handles idempotently anyway. It saves the call a commit it would
	// wait for, and, sent in the background (acks.go), the answer's round
	// trip.
	if err := c.ackLazy(ctx, wk.InboxID, pd.ToolCallID); err != nil {
		return out, fmt.Errorf("%w: inbox entry %s of tool_call_id %s: %w", ErrNotAcked, wk.InboxID, pd.ToolCallID, err)
	}
	return out, nil
}

// readResult reads and checks the tool.result card of a call.
func (c *Client) readResult(ctx context.Context, turn, callID, cardID string) (*card.Card, *card.ToolResultContent, error) {
	if cardID == "" {
		return nil, nil, fmt.Errorf("%w: tool_call_id %s: the wakeup has no tool_result_card_id", ErrNoResult, callID)
	}
	rc, err := c.store.Get(ctx, c.project, cardID)
	if errors.Is(err, cardstore.ErrNotFound) {
		return nil, nil, fmt.Errorf("%w: tool_call_id %s: tool.result card %s not found in project %s", ErrNoResult, callID, cardID, c.project)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("agent: read tool.result card %s of tool_call_id %s: %w", cardID, callID, err)
	}
	return c.checkResult(turn, callID, rc)
}

// carriedResult returns the tool.result card a wakeup carries
// (utp.Wakeup.ResultCard), checked as a read one is; nil, nil, nil when it
// carries none.
func (c *Client) carriedResult(turn, callID string, wk utp.Wakeup) (*card.Card, *card.ToolResultContent, error) {
	if len(wk.ResultCard) == 0 {
		return nil, nil, nil
	}
	rc, err := card.Parse(wk.ResultCard)
	if err != nil {
		return nil, nil, err
	}
	if rc.CardID != wk.ToolResultCardID || rc.ProjectID != c.project {
		return nil, nil, fmt.Errorf("the carried card %s of project %s is not tool_result_card_id %s of project %s", rc.CardID, rc.ProjectID, wk.ToolResultCardID, c.project)
	}
	return c.checkResult(turn, callID, rc)
}

// checkResult checks that rc is the tool.result card of the call.
func (c *Client) checkResult(turn, callID string, rc *card.Card) (*card.Card, *card.ToolResultContent, error) {
	cardID := rc.CardID
	if rc.ToolCallID != callID || rc.Metadata.AgentTurnID != turn {
		return nil, nil, fmt.Errorf("%w: card %s belongs to tool_call_id %q of turn %q, not %q of turn %q",
			ErrNoResult, cardID, rc.ToolCallID, rc.Metadata.AgentTurnID, callID, turn)
	}
	tr, err := rc.ToolResult()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: tool_call_id %s: %w", ErrNoResult, callID, err)
	}
	return rc, tr, nil
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
