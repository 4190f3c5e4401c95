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

// TypeToolCancel is the card type that records a cancel request for a call.
// It is written before any worker is told, so a worker that takes over the
// call of a dead one still sees it.
const TypeToolCancel = "tool.cancel"

// cancelTarget/cancelSuffix give the subject cancel requests are announced
// on: cg.<ver>.<project>.<channel>.evt.sys.toolcall.cancel.
const (
	cancelTarget = "toolcall"
	cancelSuffix = "cancel"
	// canceledMemory is how long a runtime remembers a cancel request for a
	// call it is not (yet) running.
	canceledMemory = 10 * time.Minute
)

// CancelNotice is the body of a cancel announcement.
type CancelNotice struct {
	AgentTurnID string `json:"agent_turn_id"`
	ToolCallID  string `json:"tool_call_id"`
	Reason      string `json:"reason,omitempty"`
}

func cancelPattern(ver string) (string, error) {
	s, err := subjects.Event(ver, "PROJECT", "CHANNEL", subjects.Sys, cancelTarget, cancelSuffix)
	if err != nil {
		return "", err
	}
	s.Project, s.Channel = "*", "*"
	return s.String(), nil
}

func (r *Runtime) onCancel(m *nats.Msg) {
	s, err := subjects.Parse(m.Subject)
	if err != nil {
		return
	}
	var n CancelNotice
	if json.Unmarshal(m.Data, &n) != nil || n.AgentTurnID == "" || n.ToolCallID == "" {
		r.log.Warn("malformed cancel notice ignored", "subject", m.Subject)
		return
	}
	key := utp.Ref(s.Project, n.AgentTurnID, n.ToolCallID).Key()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for k, at := range r.canceled {
		if now.Sub(at) > canceledMemory {
			delete(r.canceled, k)
		}
	}
	r.canceled[key] = now
	if f, ok := r.inflight[key]; ok {
		f.cancel(errCanceledByRequest)
		r.log.Info("canceling call on request", "tool_name", f.tool, "tool_call_id", n.ToolCallID, "agent_turn_id", n.AgentTurnID, "project_id", s.Project)
	}
}

// track registers a call as running in this process. It returns nil when
// the call is already running here (another delivery of the same command).
func (r *Runtime) track(key, tool string, cancel context.CancelCauseFunc) *inflight {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, busy := r.inflight[key]; busy {
		return nil
	}
	f := &inflight{cancel: cancel, tool: tool}
	r.inflight[key] = f
	if r.shuttingDown {
		cancel(errShutdown) // the drain deadline has passed: do not start it
	}
	return f
}

func (r *Runtime) untrack(key string, f *inflight) {
	r.mu.Lock()
	if r.inflight[key] == f {
		delete(r.inflight, key)
	}
	r.mu.Unlock()
}

func (r *Runtime) running(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.inflight[key]
	return ok
}

func (r *Runtime) wasCanceled(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.canceled[key]
	return ok
}

// cancelRecorded reports whether a tool.cancel card exists for the call.
// It reads the turn's cards, so it is used only on the rare take-over path.
func (j *job) cancelRecorded(ctx context.Context) bool {
	cards, err := cardstore.AllTurn(ctx, j.r.cfg.Store, j.subj.Project, j.cmd.AgentTurnID)
	if err != nil {
		return false
	}
	for _, c := range cards {
		if c.Type == TypeToolCancel && c.ToolCallID == j.cmd.ToolCallID {
			return true
		}
	}
	return false
}

// CancelOutcome says what RequestCancel did.
type CancelOutcome string

// The outcomes of RequestCancel.
const (
	// CancelFinished: the call already has a result; nothing changed.
	CancelFinished CancelOutcome = "finished"
	// CancelCanceled: no worker was running the call; it now has a
	// canceled result, which a later delivery of its command reports.
	CancelCanceled CancelOutcome = "canceled"
	// CancelRequested: a worker is running the call and has been told to
	// stop; the call ends canceled when it does.
	CancelRequested CancelOutcome = "cancel_requested"
)

// CancelRequest names the call to cancel and who asks.
type CancelRequest struct {
	ProjectID   string
	ChannelID   string
	Version     string
	AgentID     string // the agent the call belongs to
	AgentTurnID string
	ToolCallID  string
	Reason      string
	// Holder identifies the requester in the claim it may take.
	Holder string
}

// RequestCancel cancels an in-flight call: it records a tool.cancel card,
// then either writes the canceled result itself (when no live worker holds
// the call's claim) or announces the cancel so the holder stops. A call that
// already finished is left unchanged.
func RequestCancel(ctx context.Context, nc *nats.Conn, st cardstore.Store, req CancelRequest) (CancelOutcome, *card.Card, error) {
	if res, err := st.FindToolResult(ctx, req.ProjectID, req.AgentTurnID, req.ToolCallID); err == nil {
		return CancelFinished, res, nil
	} else if !errors.Is(err, cardstore.ErrNotFound) {
		return "", nil, err
	}
	now := time.Now().UTC()
	content, _ := json.Marshal(map[string]string{"reason": req.Reason, "requested_by": req.Holder})
	marker := &card.Card{
		CardID: card.NewID(), ProjectID: req.ProjectID, Type: TypeToolCancel, AuthorID: "pmo.cancel_tool_call",
		Content: content, ToolCallID: req.ToolCallID, CreatedAt: now,
		Metadata: card.Metadata{AgentID: req.AgentID, AgentTurnID: req.AgentTurnID, ToolCallID: req.ToolCallID},
	}
	if err := st.Put(ctx, marker); err != nil {
		return "", nil, fmt.Errorf("record cancel: %w", err)
	}
	key := cardstore.CallKey{AgentTurnID: req.AgentTurnID, ToolCallID: req.ToolCallID}.String()
	_, err := st.Claim(ctx, cardstore.ClaimRequest{ProjectID: req.ProjectID, Key: key, Holder: req.Holder, Lease: 30 * time.Second})
	if errors.Is(err, cardstore.ErrClaimHeld) {
		subj, serr := subjects.Event(req.Version, req.ProjectID, req.ChannelID, subjects.Sys, cancelTarget, cancelSuffix)
		if serr != nil {
			return "", nil, serr
		}
		body, _ := json.Marshal(CancelNotice{AgentTurnID: req.AgentTurnID, ToolCallID: req.ToolCallID, Reason: req.Reason})
		if err := nc.Publish(subj.String(), body); err != nil {
			return "", nil, fmt.Errorf("announce cancel: %w", err)
		}
		return CancelRequested, nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("claim call: %w", err)
	}
	defer func() { _ = st.Release(context.Background(), req.ProjectID, key, req.Holder) }()
	of := ResultOf{ProjectID: req.ProjectID, AgentID: req.AgentID, AgentTurnID: req.AgentTurnID, ToolCallID: req.ToolCallID,
		AuthorID: "pmo.cancel_tool_call"}
	res, err := of.Card(card.NewResultContent(card.StatusCanceled, card.Suspend, card.CodeCanceled,
		"the call was canceled by cancel_tool_call before it ran: "+req.Reason, nil), nil)
	if err != nil {
		return "", nil, err
	}
	res, existed, err := WriteResult(ctx, st, res)
	if existed {
		return CancelFinished, res, err
	} else if err != nil {
		return "", nil, fmt.Errorf("write canceled result: %w", err)
	}
	return CancelCanceled, res, nil
}
