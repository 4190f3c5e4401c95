package hem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/atp/rails"
	"github.com/utpmesh/utpmesh/services/state"
)

// Errors of the lifecycle; every error returned wraps one of them (or a
// booking error).
var (
	// ErrUnknownHEM: the hem_id is not in the catalogue.
	ErrUnknownHEM = errors.New("hem: unknown hem_id")
	// ErrPrecondition: the trigger or the arguments do not fit the HEM.
	ErrPrecondition = errors.New("hem: precondition not met")
	// ErrWrongState: the booking is not in a state the HEM accepts.
	ErrWrongState = errors.New("hem: booking in the wrong state")
	// ErrNoTask: no task of that id.
	ErrNoTask = errors.New("hem: no such task")
	// ErrResolved: the task was already resolved.
	ErrResolved = errors.New("hem: task already resolved")
	// ErrBadInput: a request misses what it needs (a decline's reason).
	ErrBadInput = errors.New("hem: bad input")
	// ErrToken: the human_confirmation_token is missing or wrong.
	ErrToken = errors.New("hem: human_confirmation_token missing or wrong")
)

// Task is one atp_invoke_hem task.
type Task struct {
	TaskID    string          `json:"task_id"`
	Project   string          `json:"project"`
	HEMID     string          `json:"hem_id"`
	BookingID string          `json:"booking_object_id,omitempty"`
	Context   json.RawMessage `json:"context"`
	Status    string          `json:"status"`
	// The call that invoked it (where its resolution is reported).
	AgentID     string    `json:"agent_id"`
	AgentTurnID string    `json:"agent_turn_id"`
	ToolCallID  string    `json:"tool_call_id"`
	TurnEpoch   int64     `json:"turn_epoch"`
	Version     string    `json:"version"`
	Channel     string    `json:"channel"`
	CreatedAt   time.Time `json:"created_at"`
	Deadline    time.Time `json:"protocol_deadline"`
	// Token is the human_confirmation_token (operators only).
	Token      string     `json:"human_confirmation_token,omitempty"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	// ResolvedBy is who decided: ResolvedByOperator or
	// ResolvedByDeadline (tasks resolved before issue 23 hold the
	// deciding agent's id).
	ResolvedBy string `json:"resolved_by,omitempty"`
	// Operator is the name of the operator who decided (the call's
	// principal operator:<name>); "" when the deadline decided.
	Operator         string   `json:"operator,omitempty"`
	Reason           string   `json:"reason,omitempty"`
	Note             string   `json:"note,omitempty"`
	HEMOutcome       string   `json:"hem_outcome,omitempty"`
	DecisionObjectID string   `json:"decision_object_id,omitempty"`
	EventLogEntries  []string `json:"event_log_entries"`
	// Secondary is set when the deadline decided.
	Secondary bool `json:"secondary_path_taken,omitempty"`
	// WakePending: the resolution has not been reported to the agent yet.
	WakePending bool `json:"wake_pending,omitempty"`
	// Expansion is a HEM-MANDATE-01 task's structured request (nil: a
	// free-text escalation), Requester the invoking call's mandate, and
	// Grant the sub-mandate its approval issued.
	Expansion *Expansion `json:"expansion,omitempty"`
	Requester *Requester `json:"requester,omitempty"`
	Grant     *Grant     `json:"grant,omitempty"`
	// ConfirmationPrompt is Prompt, in operators' listings (Redacted)
	// only.
	ConfirmationPrompt string `json:"confirmation_prompt,omitempty"`
}

// PollOutput is the seed's poll output of the task.
func (t *Task) PollOutput() map[string]any {
	out := map[string]any{"task_id": t.TaskID, "status": t.Status, "hem_id": t.HEMID}
	switch t.Status {
	case StatusPending:
		out["confirmation_required"] = true
		out["elicitation_sent_to"] = "operator"
		out["protocol_deadline"] = t.Deadline
	case StatusComplete:
		if t.ResolvedBy != "" {
			out["confirmed_by"] = t.ResolvedBy
		}
		out["hem_outcome"] = t.HEMOutcome
		out["decision_object_id"] = t.DecisionObjectID
		out["event_log_entries"] = t.EventLogEntries
		if t.Grant != nil { // the token itself only in the resolution (ResolutionOutput)
			out["mandate_jti"] = t.Grant.JTI
			out["parent_mandate_jti"] = t.Grant.ParentJTI
			out["granted_policy"] = t.Grant.Policy
		}
	case StatusDeclined:
		out["declined_by"] = t.ResolvedBy
		out["reason"] = t.Reason
	}
	if t.Operator != "" {
		// The seed's confirmed_by/declined_by say "operator"; this says who.
		out["operator"] = t.Operator
	}
	if t.Expansion != nil {
		out["expansion"] = t.Expansion
	}
	if t.Secondary {
		out["secondary_path_taken"] = true
	}
	return out
}

// ResolutionOutput is what the invoking agent's turn receives when the
// task resolves: the poll output and, when the approval issued a
// sub-mandate, the token itself ("mandate"), which no other output shows.
func (t *Task) ResolutionOutput() map[string]any {
	out := t.PollOutput()
	if t.Grant != nil && t.Status == StatusComplete {
		out["mandate"] = t.Grant.Token
	}
	return out
}

// Redacted is a copy of t without the issued sub-mandate's token, with
// its confirmation prompt (what operators' listings show).
func (t *Task) Redacted() *Task {
	c := *t
	c.ConfirmationPrompt = t.Prompt()
	if c.Grant != nil {
		g := *c.Grant
		g.Token = ""
		c.Grant = &g
	}
	return &c
}

// Who resolved a task (Task.ResolvedBy; the poll output's confirmed_by
// and declined_by).
const (
	ResolvedByOperator = "operator"
	ResolvedByDeadline = "protocol_deadline"
)

// Waker reports a resolved task to the agent that invoked it.
type Waker func(ctx context.Context, t *Task) error

// Manager runs the lifecycle on the booking store's file.
type Manager struct {
	store *booking.Store
	cat   *Catalogue
	wake  Waker
}

// NewManager returns a manager; wake may be nil (resolutions are then
// only visible by polling).
func NewManager(store *booking.Store, cat *Catalogue, wake Waker) *Manager {
	return &Manager{store: store, cat: cat, wake: wake}
}

// Catalogue is the manager's catalogue.
func (m *Manager) Catalogue() *Catalogue { return m.cat }

func putTask(tx state.Tx, t *Task) error {
	raw, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return tx.Bucket(t.Project, booking.BucketHEMTasks).Put(t.TaskID, raw)
}

func getTask(tx state.Tx, project, id string) (*Task, error) {
	raw, found, err := tx.Bucket(project, booking.BucketHEMTasks).Get(id)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%w: %q in project %s (utpmesh hem ls lists the tasks)", ErrNoTask, id, project)
	}
	t := &Task{}
	return t, json.Unmarshal(raw, t)
}

// Invocation is an atp_invoke_hem request.
type Invocation struct {
	TaskID, Project, HEMID, BookingID string
	Context                           json.RawMessage
	TriggerReason                     string
	AgentID, AgentTurnID, ToolCallID  string
	TurnEpoch                         int64
	Version, Channel                  string
	// Requester is the invoking call's mandate (HEM-MANDATE-01: what an
	// approval narrows from); nil without one.
	Requester *Requester
}

// Invoke creates a PENDING task (or returns the task of the same id, for a
// redelivered call). With a booking, the task, the booking's active HEM
// mark and its HEM_INVOKED event are written in one transaction.
func (m *Manager) Invoke(ctx context.Context, in Invocation) (*Task, error) {
	e, ok := m.cat.Get(in.HEMID)
	if !ok {
		return nil, fmt.Errorf("%w: %q; the catalogue has %s", ErrUnknownHEM, in.HEMID, strings.Join(m.cat.IDs(), ", "))
	}
	if len(e.TriggerReasons) > 0 && !slices.Contains(e.TriggerReasons, in.TriggerReason) {
		return nil, fmt.Errorf("%w: %s takes context.trigger_reason %s, not %q", ErrPrecondition, e.HEMID, strings.Join(e.TriggerReasons, " or "), in.TriggerReason)
	}
	if in.TriggerReason == TriggerMandateGap && e.HEMID != MandateGapID {
		return nil, fmt.Errorf("%w: trigger_reason %s escalates with hem_id %s, not %s", ErrPrecondition, TriggerMandateGap, MandateGapID, e.HEMID)
	}
	if e.NeedsBooking && in.BookingID == "" {
		return nil, fmt.Errorf("%w: %s acts on a booking: pass booking_object_id", ErrPrecondition, e.HEMID)
	}
	var exp *Expansion
	if e.HEMID == MandateGapID {
		if exp = ParseExpansion(in.Context); exp != nil && !exp.Valid() {
			return nil, fmt.Errorf("%w: the requested action %q is not a Cedar action; write it like ATPAction::\"update_pre_arrangement\"", ErrBadInput, exp.Action)
		}
	}
	if existing, err := m.Get(ctx, in.Project, in.TaskID); err == nil {
		return existing, nil
	}
	now := m.store.Now()
	t := &Task{TaskID: in.TaskID, Project: in.Project, HEMID: in.HEMID, BookingID: in.BookingID, Context: in.Context, Status: StatusPending,
		AgentID: in.AgentID, AgentTurnID: in.AgentTurnID, ToolCallID: in.ToolCallID, TurnEpoch: in.TurnEpoch, Version: in.Version, Channel: in.Channel,
		CreatedAt: now, Deadline: now.Add(e.ProtocolDeadline), EventLogEntries: []string{}, Expansion: exp}
	if exp != nil {
		t.Requester = in.Requester
	}
	if e.TokenRequired {
		var b [12]byte
		_, _ = rand.Read(b[:])
		t.Token = hex.EncodeToString(b[:])
	}
	if in.BookingID == "" {
		return t, m.store.State().Update(ctx, func(tx state.Tx) error { return putTask(tx, t) })
	}
	var blocked *rails.Violation
	_, err := m.store.Update(ctx, in.Project, in.BookingID, func(tx *booking.Tx) error {
		blocked, t.EventLogEntries = nil, []string{} // the closure may run again
		if len(e.States) > 0 && !slices.Contains(e.States, tx.Booking.ToolState()) {
			return fmt.Errorf("%w: %s needs booking %s in %s; it is in %s", ErrWrongState, e.HEMID, in.BookingID, strings.Join(e.States, " or "), tx.Booking.ToolState())
		}
		if e.Rail1 != nil {
			log, err := tx.Events()
			if err != nil {
				return err
			}
			if blocked = rails.CheckEscalation(e.HEMID, e.Rail1, log); blocked != nil {
				_, err := tx.Append(booking.EventGuardrail, "atp.rail1", map[string]any{"rail": blocked.Rail, "rule_id": blocked.RuleID,
					"reason": blocked.Reason, "hem_id": e.HEMID, "agent_id": in.AgentID, "context": in.Context})
				return err
			}
		}
		ev, err := tx.Append(booking.EventHEMInvoked, "agent:"+in.AgentID, map[string]any{"task_id": t.TaskID, "hem_id": t.HEMID,
			"context": t.Context, "protocol_deadline": t.Deadline, "escalation_dispatched_at": now})
		if err != nil {
			return err
		}
		t.EventLogEntries = append(t.EventLogEntries, ev.ID)
		tx.AddHEM(t.TaskID)
		return putTask(tx.State(), t)
	})
	if err != nil {
		return nil, err
	}
	if blocked != nil {
		return nil, blocked
	}
	return t, nil
}

// Get returns a task.
func (m *Manager) Get(ctx context.Context, project, id string) (*Task, error) {
	var t *Task
	err := m.store.State().View(ctx, func(tx state.Tx) error {
		var err error
		t, err = getTask(tx, project, id)
		return err
	})
	return t, err
}

// List returns the project's tasks, oldest first; status "" means all.
func (m *Manager) List(ctx context.Context, project, status string) ([]*Task, error) {
	out := []*Task{}
	err := m.store.State().View(ctx, func(tx state.Tx) error {
		out = out[:0]
		return tx.Bucket(project, booking.BucketHEMTasks).Scan("", false, func(_ string, v []byte) error {
			t := &Task{}
			if err := json.Unmarshal(v, t); err != nil {
				return err
			}
			if status == "" || t.Status == status {
				out = append(out, t)
			}
			return nil
		})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, err
}

// ForBooking lists a booking's tasks, oldest first.
func (m *Manager) ForBooking(ctx context.Context, project, bookingID string) ([]*Task, error) {
	all, err := m.List(ctx, project, "")
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(t *Task) bool { return t.BookingID != bookingID }), nil
}

// Confirm runs a pending task's HEM on the confirmation of the operator
// named operator (the caller checked that an operator made the call): the
// task ends COMPLETE with the entry's outcome and a decision object,
// confirmed_by "operator", and the operator's name in the task and its
// HEM_RESOLVED event.
func (m *Manager) Confirm(ctx context.Context, project, id, operator, token, note string) (*Task, error) {
	return m.ConfirmGrant(ctx, project, id, operator, token, note, nil)
}

// CheckToken checks a confirmation's human_confirmation_token against a
// pending task's, before anything is done for it.
func (m *Manager) CheckToken(t *Task, token string) error {
	e, ok := m.cat.Get(t.HEMID)
	if ok && e.TokenRequired && token != t.Token {
		return fmt.Errorf("%w: %s needs the human_confirmation_token shown by utpmesh hem ls for task %s", ErrToken, e.HEMID, t.TaskID)
	}
	return nil
}

// ConfirmGrant is Confirm recording g, the sub-mandate an approved
// HEM-MANDATE-01 expansion issued (nil: none), on the task and, without
// its token, in the HEM_RESOLVED event.
func (m *Manager) ConfirmGrant(ctx context.Context, project, id, operator, token, note string, g *Grant) (*Task, error) {
	if operator == "" {
		return nil, fmt.Errorf("%w: confirming needs the operator's name", ErrBadInput)
	}
	return m.resolve(ctx, project, id, func(t *Task, e Entry) error {
		if e.TokenRequired && token != t.Token {
			return fmt.Errorf("%w: %s needs the human_confirmation_token shown by utpmesh hem ls for task %s", ErrToken, e.HEMID, id)
		}
		t.Status, t.HEMOutcome, t.ResolvedBy, t.Operator, t.Note, t.Grant = StatusComplete, e.Outcome, ResolvedByOperator, operator, note, g
		return nil
	})
}

// Decline ends a pending task DECLINED on the decision of the operator
// named operator; nothing of the HEM runs. declined_by is "operator".
func (m *Manager) Decline(ctx context.Context, project, id, operator, reason string) (*Task, error) {
	if operator == "" {
		return nil, fmt.Errorf("%w: declining needs the operator's name", ErrBadInput)
	}
	if strings.TrimSpace(reason) == "" {
		return nil, fmt.Errorf("%w: declining needs a reason (the agent reads it)", ErrBadInput)
	}
	return m.resolve(ctx, project, id, func(t *Task, e Entry) error {
		t.Status, t.ResolvedBy, t.Operator, t.Reason = StatusDeclined, ResolvedByOperator, operator, reason
		return nil
	})
}

// Expire is ExpireProject for every project with tasks.
func (m *Manager) Expire(ctx context.Context) ([]*Task, error) {
	var projects []string
	if err := m.store.State().View(ctx, func(tx state.Tx) error {
		var err error
		projects, err = tx.Projects()
		return err
	}); err != nil {
		return nil, err
	}
	var all []*Task
	for _, p := range projects {
		done, err := m.ExpireProject(ctx, p)
		all = append(all, done...)
		if err != nil {
			return all, err
		}
	}
	return all, nil
}

// ExpireProject resolves every pending task whose protocol_deadline has passed by
// the store's clock through its entry's secondary path, and reports
// resolutions not reported yet (a crash between resolution and report).
// The service's timeout loop calls it; it is safe to call at any time.
func (m *Manager) ExpireProject(ctx context.Context, project string) ([]*Task, error) {
	pending, err := m.List(ctx, project, "")
	if err != nil {
		return nil, err
	}
	now := m.store.Now()
	var done []*Task
	for _, t := range pending {
		if t.Status != StatusPending {
			if t.WakePending {
				m.report(ctx, t)
			}
			continue
		}
		if now.Before(t.Deadline) {
			continue
		}
		r, err := m.resolve(ctx, project, t.TaskID, func(t *Task, e Entry) error {
			t.Secondary, t.ResolvedBy = true, ResolvedByDeadline
			t.Status = e.Secondary.Status
			if t.Status == StatusComplete {
				t.HEMOutcome = e.Secondary.Outcome
			} else {
				t.Reason = fmt.Sprintf("no operator decision within %s; secondary path: %s", e.Deadline, e.Secondary.Description)
			}
			return nil
		})
		if errors.Is(err, ErrResolved) {
			continue
		}
		if err != nil {
			return done, err
		}
		done = append(done, r)
	}
	return done, nil
}

// resolve applies decide to a pending task and stores it with the
// booking's HEM_RESOLVED event, releasing the booking, in one
// transaction; then reports the resolution to the agent.
func (m *Manager) resolve(ctx context.Context, project, id string, decide func(t *Task, e Entry) error) (*Task, error) {
	var out *Task
	apply := func(tx state.Tx, bt *booking.Tx) error {
		t, err := getTask(tx, project, id)
		if err != nil {
			return err
		}
		if t.Status != StatusPending {
			return fmt.Errorf("%w: task %s is %s (by %s)", ErrResolved, id, t.Status, t.ResolvedBy)
		}
		e, ok := m.cat.Get(t.HEMID)
		if !ok {
			return fmt.Errorf("%w: %s is no longer in the catalogue", ErrUnknownHEM, t.HEMID)
		}
		if err := decide(t, e); err != nil {
			return err
		}
		now := m.store.Now()
		t.ResolvedAt, t.WakePending = &now, true
		if t.Status == StatusComplete {
			t.DecisionObjectID = "dec_" + strings.TrimPrefix(t.TaskID, "hem_")
		}
		if bt != nil {
			actor := "atp:" + ResolvedByDeadline
			if t.Operator != "" {
				actor = "operator:" + t.Operator
			}
			data := map[string]any{"task_id": t.TaskID, "hem_id": t.HEMID,
				"status": t.Status, "resolved_by": t.ResolvedBy, "operator": t.Operator, "hem_outcome": t.HEMOutcome, "decision_object_id": t.DecisionObjectID, "reason": t.Reason,
				"note": t.Note, "secondary_path_taken": t.Secondary, "escalation_resolved_at": now}
			if t.Grant != nil { // the sub-mandate's record, never its token
				data["mandate_issued"] = map[string]any{"mandate_jti": t.Grant.JTI, "parent_mandate_jti": t.Grant.ParentJTI,
					"granted_policy": t.Grant.Policy, "subject": t.AgentID, "exp": t.Grant.ExpiresAt}
			}
			ev, err := bt.Append(booking.EventHEMResolved, actor, data)
			if err != nil {
				return err
			}
			t.EventLogEntries = append(t.EventLogEntries, ev.ID)
			bt.RemoveHEM(t.TaskID)
		}
		out = t
		return putTask(tx, t)
	}
	t, err := m.Get(ctx, project, id)
	if err != nil {
		return nil, err
	}
	if t.BookingID == "" {
		err = m.store.State().Update(ctx, func(tx state.Tx) error { return apply(tx, nil) })
	} else {
		_, err = m.store.Update(ctx, project, t.BookingID, func(bt *booking.Tx) error { return apply(bt.State(), bt) })
	}
	if err != nil {
		return nil, err
	}
	m.report(ctx, out)
	return out, nil
}

// report wakes the agent and clears WakePending; a failure leaves it set
// for Expire to retry.
func (m *Manager) report(ctx context.Context, t *Task) {
	if m.wake == nil {
		return
	}
	if err := m.wake(ctx, t); err != nil {
		return
	}
	_ = m.store.State().Update(ctx, func(tx state.Tx) error {
		cur, err := getTask(tx, t.Project, t.TaskID)
		if err != nil {
			return err
		}
		cur.WakePending = false
		t.WakePending = false
		return putTask(tx, cur)
	})
}
