package kit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/internal/determ"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// The resolve actions.
const (
	ActionConfirm = "confirm"
	ActionCancel  = "cancel"
)

// ResolveOp is the svc operation of the confirmation endpoint.
const ResolveOp = "resolve"

// ServiceName is the svc service token of a group's confirmation endpoint.
func ServiceName(group string) string { return "atlas-" + group }

// Origin is the call a pending confirmation parks.
type Origin struct {
	Project     string `json:"project_id"`
	Channel     string `json:"channel_id"`
	Version     string `json:"version"`
	AgentID     string `json:"agent_id"`
	AgentTurnID string `json:"agent_turn_id"`
	TurnEpoch   int64  `json:"turn_epoch,omitempty"`
	StepID      string `json:"step_id,omitempty"`
	TraceID     string `json:"trace_id,omitempty"`
	ToolCallID  string `json:"tool_call_id"`
	Time        string `json:"time"`
}

// Resolution is how a pending confirmation ended.
type Resolution struct {
	// Status is OK, SKIPPED or FAILED.
	Status         string          `json:"status"`
	ConfirmationID string          `json:"confirmation_id"`
	ToolName       string          `json:"tool_name"`
	Result         json.RawMessage `json:"result,omitempty"`
	Undo           *receipts.Undo  `json:"undo,omitempty"`
	Error          *card.Error     `json:"error,omitempty"`
	// Action, ByToolCallID, ByAgentTurnID and AtUTC name the resolving call.
	Action        string `json:"action"`
	ByToolCallID  string `json:"by_tool_call_id"`
	ByAgentTurnID string `json:"by_agent_turn_id"`
	AtUTC         string `json:"at_utc"`
}

// Pending is a call waiting for confirmation.
type Pending struct {
	ConfirmationID string          `json:"confirmation_id"`
	ToolName       string          `json:"tool_name"`
	Args           json.RawMessage `json:"args"`
	Would          json.RawMessage `json:"would"`
	ExpiresAt      string          `json:"expires_at"`
	Origin         Origin          `json:"origin"`
	// Resolution is nil while pending.
	Resolution *Resolution `json:"resolution,omitempty"`
	// Changes and Undo of the executed action (for the receipt).
	Changes []receipts.Change `json:"changes,omitempty"`
}

// PendingResult is the result of a call that needs confirmation.
type PendingResult = receipts.PendingResult

// ConfirmationID derives the confirmation id of a call: cfm_<group>_<hash>.
func ConfirmationID(group, project, turn, toolCallID string) string {
	return "cfm_" + group + "_" + determ.Hash(16, project, turn, toolCallID)
}

// GroupOf returns the group a confirmation id belongs to.
func GroupOf(confirmationID string) (string, bool) {
	rest, ok := strings.CutPrefix(confirmationID, "cfm_")
	if !ok {
		return "", false
	}
	g, _, ok := strings.Cut(rest, "_")
	if !ok {
		return "", false
	}
	for _, known := range atlas.Groups {
		if g == known {
			return g, true
		}
	}
	return "", false
}

// park stores a pending confirmation instead of executing the call.
func (s *Service) park(ctx context.Context, sp *Spec, x *Exec, entry receipts.ToolCall, hash string) (json.RawMessage, receipts.Record, error) {
	var would any
	if err := s.st.View(ctx, func(tx state.Tx) error {
		x.Tx = tx
		var err error
		would, err = sp.Plan(x)
		return err
	}); err != nil {
		return nil, receipts.Record{}, s.txErr(ctx, err)
	}
	cc := x.Call.CallCard
	p := Pending{
		ConfirmationID: ConfirmationID(s.group, x.Project, x.AgentTurnID, x.ToolCallID),
		ToolName:       sp.Name, Args: x.Args, Would: toolkit.Raw(would),
		ExpiresAt: determ.Format(x.Time.Add(toolkit.PendingTTL)),
		Origin: Origin{Project: x.Project, Channel: x.Channel, Version: x.Version, AgentID: x.AgentID,
			AgentTurnID: x.AgentTurnID, TurnEpoch: cc.Metadata.TurnEpoch, StepID: cc.Metadata.StepID,
			TraceID: cc.Metadata.TraceID, ToolCallID: x.ToolCallID, Time: x.Now()},
	}
	value, err := json.Marshal(PendingResult{Status: receipts.StatusPendingConfirm, ConfirmationID: p.ConfirmationID,
		ToolName: sp.Name, Would: p.Would, ExpiresAt: p.ExpiresAt})
	if err != nil {
		return nil, receipts.Record{}, err
	}
	entry.Status, entry.Result, entry.ConfirmationID = receipts.StatusPendingConfirm, json.RawMessage("null"), p.ConfirmationID
	rec := receipts.Record{Kind: receipts.KindCall, ToolCall: entry}
	var prev *toolkit.CallRecord
	err = s.st.Update(ctx, func(tx state.Tx) error {
		x.Tx = tx
		// Recorded since the caller's read (a retried commit, another
		// execution): answer from the record, park nothing.
		var gerr error
		if prev, gerr = getCall(x); gerr != nil || prev != nil {
			return gerr
		}
		b := x.Bucket(bucketPending)
		if err := toolkit.PutJSON(b, p.ConfirmationID, p); err != nil {
			return err
		}
		return putCall(x, sp.Name, hash, value, rec)
	})
	if err != nil {
		return nil, receipts.Record{}, s.txErr(ctx, err)
	}
	if prev != nil {
		return replay(sp, x, prev, hash)
	}
	return value, rec, nil
}

// ResolveRequest asks a group's endpoint to confirm or cancel a pending call.
type ResolveRequest struct {
	ConfirmationID string `json:"confirmation_id"`
	// Action is confirm or cancel.
	Action string `json:"action"`
	// ByToolCallID, ByAgentTurnID and ByAgentID are the resolving call.
	ByToolCallID  string `json:"by_tool_call_id"`
	ByAgentTurnID string `json:"by_agent_turn_id"`
	ByAgentID     string `json:"by_agent_id"`
	// At is the resolving call's time (RFC 3339).
	At string `json:"at"`
}

// codes map the endpoint's errors to wire codes.
var codes = svc.Codes{{Err: ErrNotPending, Code: svc.CodeBadRequest}}

// serveConfirmations starts the confirmation endpoint once NATS is known.
func (s *Service) serveConfirmations() {
	ctx := s.deps.Context
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	nc, _, err := s.deps.Conn(ctx)
	if err != nil && ctx.Err() != nil {
		// The service closed (or its context ended) before the mesh it
		// waited for was up: an aborted start, which its caller reports.
		s.log.Debug("confirmation endpoint not started: the service stopped before the mesh was up")
		return
	}
	if err != nil {
		s.log.Error("confirmation endpoint not started", "err", err)
		return
	}
	srv, err := svc.NewServer(nc, svc.Config{Service: ServiceName(s.group), Version: s.deps.Version, Codes: codes, Logger: s.log})
	if err == nil {
		err = srv.Handle(ResolveOp, s.handleResolve)
	}
	if err == nil {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		s.srv = srv
		err = srv.Start()
		s.mu.Unlock()
	}
	if err != nil {
		s.log.Error("confirmation endpoint not started", "err", err)
	}
}

func (s *Service) handleResolve(ctx context.Context, scope svc.Scope, data []byte) (any, error) {
	var req ResolveRequest
	if err := svc.Decode(data, &req); err != nil {
		return nil, err
	}
	return s.Resolve(ctx, scope.Project, req)
}

// Resolve confirms or cancels a pending call of project and writes the
// transition receipt into the original call's turn.
func (s *Service) Resolve(ctx context.Context, project string, req ResolveRequest) (*Resolution, error) {
	if req.Action != ActionConfirm && req.Action != ActionCancel {
		return nil, fmt.Errorf("%w: action %q: want confirm or cancel", ErrNotPending, req.Action)
	}
	at, err := time.Parse(time.RFC3339, req.At)
	if err != nil {
		return nil, fmt.Errorf("%w: at %q is not an RFC 3339 time", ErrNotPending, req.At)
	}
	if err := s.Refused(); err != nil {
		return nil, fmt.Errorf("%w: %v", svc.ErrUnavailable, err)
	}
	_, st, err := s.deps.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", svc.ErrUnavailable, err)
	}
	var p Pending
	var out Outcome
	load := func(tx state.Tx) (state.Bucket, error) {
		b := tx.Bucket(project, bucketPending)
		found, err := toolkit.GetJSON(b, req.ConfirmationID, &p)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("%w: no confirmation %s in project %s of atlas.%s (use the confirmation_id of a PENDING_CONFIRM result)", ErrNotPending, req.ConfirmationID, project, s.group)
		}
		return b, nil
	}
	resolved := func(status string) *Resolution {
		return &Resolution{Status: status, ConfirmationID: p.ConfirmationID, ToolName: p.ToolName, Action: req.Action,
			ByToolCallID: req.ByToolCallID, ByAgentTurnID: req.ByAgentTurnID, AtUTC: determ.Format(at)}
	}
	var runErr error
	err = s.st.Update(ctx, func(tx state.Tx) error {
		b, err := load(tx)
		if err != nil {
			return err
		}
		if r := p.Resolution; r != nil {
			if r.ByToolCallID == req.ByToolCallID && r.ByAgentTurnID == req.ByAgentTurnID && r.Action == req.Action {
				return nil // a redelivery of the resolving call
			}
			return fmt.Errorf("%w: confirmation %s was already used: %s by call %s of turn %s at %s (status %s); a confirmation id works once — call %s again for a new one",
				ErrNotPending, p.ConfirmationID, r.Action+"ed", r.ByToolCallID, r.ByAgentTurnID, r.AtUTC, r.Status, p.ToolName)
		}
		if exp, _ := time.Parse(time.RFC3339, p.ExpiresAt); at.After(exp) {
			return fmt.Errorf("%w: confirmation %s expired at %s; call %s again for a new one", ErrNotPending, p.ConfirmationID, p.ExpiresAt, p.ToolName)
		}
		if req.Action == ActionCancel {
			p.Resolution = resolved(receipts.StatusSkipped)
			return toolkit.PutJSON(b, p.ConfirmationID, p)
		}
		sp := s.specs[p.ToolName]
		if sp == nil {
			return fmt.Errorf("%w: tool %s is not served by atlas.%s", ErrNotPending, p.ToolName, s.group)
		}
		x := &Exec{Tx: tx, Project: project, Channel: p.Origin.Channel, Version: p.Origin.Version,
			ToolCallID: p.Origin.ToolCallID, AgentTurnID: p.Origin.AgentTurnID, AgentID: p.Origin.AgentID,
			Time: determ.Time(at), Args: p.Args, Svc: s}
		out, runErr = sp.Run(x)
		if runErr != nil {
			return runErr
		}
		value, err := EncodeResult(out.Result, true, out.Undo)
		if err != nil {
			return err
		}
		p.Resolution = resolved(receipts.StatusOK)
		p.Resolution.Result, p.Resolution.Undo, p.Changes = value, out.Undo, out.Changes
		return toolkit.PutJSON(b, p.ConfirmationID, p)
	})
	if runErr != nil {
		var ce *card.Error
		if !errors.As(runErr, &ce) {
			ce = &card.Error{Code: card.CodeInternalError, Message: runErr.Error()}
		}
		err = s.st.Update(ctx, func(tx state.Tx) error {
			b, err := load(tx)
			if err != nil {
				return err
			}
			p.Resolution = resolved(receipts.StatusFailed)
			p.Resolution.Error = ce
			return toolkit.PutJSON(b, p.ConfirmationID, p)
		})
	}
	if err != nil {
		if errors.Is(err, ErrNotPending) {
			return nil, err
		}
		if err = s.txErr(ctx, err); errors.Is(err, worker.ErrRetryLater) {
			err = fmt.Errorf("%w: %v", svc.ErrUnavailable, err) // the caller retries
		}
		return nil, err
	}
	if runErr == nil && out.After != nil {
		if err := out.After(ctx); err != nil {
			s.log.Warn("confirmed action: after-commit step failed", "confirmation_id", p.ConfirmationID, "err", err)
		}
	}
	if err := s.writeTransition(ctx, st, &p); err != nil {
		return nil, fmt.Errorf("%w: %s was %s, but its receipt could not be written: %v", svc.ErrUnavailable, p.ConfirmationID, p.Resolution.Status, err)
	}
	return p.Resolution, nil
}

// writeTransition writes the receipt of a resolved confirmation into the
// original call's turn.
func (s *Service) writeTransition(ctx context.Context, st interface {
	Put(context.Context, ...*card.Card) error
}, p *Pending) error {
	r := p.Resolution
	o := p.Origin
	callCard := &card.Card{ProjectID: o.Project, ToolCallID: o.ToolCallID, Metadata: card.Metadata{
		AgentID: o.AgentID, AgentTurnID: o.AgentTurnID, TurnEpoch: o.TurnEpoch, StepID: o.StepID, TraceID: o.TraceID}}
	result := r.Result
	if len(result) == 0 {
		result = json.RawMessage("null")
	}
	rec := receipts.Record{Kind: receipts.KindTransition,
		ToolCall: receipts.ToolCall{ToolName: p.ToolName, Args: p.Args, Status: r.Status, Result: result,
			TimestampUTC: o.Time, ToolCallID: o.ToolCallID, AgentTurnID: o.AgentTurnID, ConfirmationID: p.ConfirmationID},
		Changes: p.Changes, Undo: r.Undo,
		Transition: &receipts.Transition{ConfirmationID: p.ConfirmationID, ToolCallID: o.ToolCallID, ToolName: p.ToolName,
			From: receipts.StatusPendingConfirm, To: r.Status, ByToolCallID: r.ByToolCallID, ByAgentTurnID: r.ByAgentTurnID, AtUTC: r.AtUTC}}
	if r.Error != nil {
		rec.Errors = []receipts.Error{{Code: string(r.Error.Code), Message: r.Error.Message}}
	}
	at, _ := time.Parse(time.RFC3339, r.AtUTC)
	c, err := receipts.Card(callCard, s.Author(), rec, at)
	if err != nil {
		return err
	}
	return st.Put(ctx, c)
}

// ResolveRemote sends a resolve request for a confirmation id to the
// group that owns it, on behalf of the worker call that asks (ATLAS_CONFIRM
// or ATLAS_CANCEL), and maps the answer to a tool failure when it is one.
func ResolveRemote(ctx context.Context, nc *nats.Conn, call *worker.Call, confirmationID, action string) (*Resolution, error) {
	group, ok := GroupOf(confirmationID)
	if !ok {
		return nil, toolkit.BadRequest("confirmation_id %q is not an ATLAS confirmation id (they look like cfm_calendar_0123456789abcdef; copy it from a PENDING_CONFIRM result)", confirmationID)
	}
	subj, err := svc.Subject(call.Version, call.ProjectID, call.ChannelID, ServiceName(group), ResolveOp)
	if err != nil {
		return nil, toolkit.BadRequest("%v", err)
	}
	req := ResolveRequest{ConfirmationID: confirmationID, Action: action, ByToolCallID: call.Command.ToolCallID,
		ByAgentTurnID: call.Command.AgentTurnID, ByAgentID: call.Command.AgentID, At: determ.Format(call.CallCard.CreatedAt)}
	var res Resolution
	err = svc.Call(ctx, nc, subj, codes, req, &res)
	var re *svc.RemoteError
	switch {
	case err == nil:
		return &res, nil
	case errors.Is(err, ErrNotPending), errors.As(err, &re) && re.Code == svc.CodeBadRequest:
		msg := err.Error()
		if re != nil {
			msg = re.Message
		}
		return nil, worker.Fail(card.CodeBadRequest, msg)
	case errors.Is(err, svc.ErrUnavailable) && re == nil:
		return nil, worker.Fail(card.CodeUpstreamUnavailable, fmt.Sprintf("atlas.%s, which holds %s, is not running (start it: utpmesh worker atlas.%s): %v", group, confirmationID, group, err))
	case errors.Is(err, svc.ErrTimeout), re != nil && (re.Code == svc.CodeUnavailable || re.Code == svc.CodeTimeout):
		// The owner may have resolved it (no answer in time; its receipt
		// could not be written): run this call again later. The owner
		// answers a repeat by the same call with the same resolution.
		return nil, fmt.Errorf("%w: atlas.%s did not say whether %s was resolved: %v", worker.ErrRetryLater, group, confirmationID, err)
	default:
		return nil, worker.Fail(card.CodeUpstreamUnavailable, fmt.Sprintf("atlas.%s: %v", group, err))
	}
}
