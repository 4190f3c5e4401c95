package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// Request and reply bodies of the svc operations. See docs/protocol.md.
type (
	listRequest = ListQuery
	listReply   struct {
		Entries []Entry `json:"entries"`
	}
	getRequest struct {
		InboxID string `json:"inbox_id"`
	}
	getReply struct {
		Entry *Entry `json:"entry"`
	}
	ackRequest struct {
		InboxIDs []string `json:"inbox_ids"`
		// Lazy: reply before the ack is on disk (see API.AckLazy).
		Lazy bool `json:"lazy,omitempty"`
	}
	ackReply struct {
		Acked int `json:"acked"`
	}
	setEpochRequest struct {
		AgentTurnID string `json:"agent_turn_id"`
		TurnEpoch   *int64 `json:"turn_epoch"`
	}
	setEpochReply struct {
		TurnEpoch int64 `json:"turn_epoch"`
	}
)

func checkProject(project string) error {
	if err := card.ValidateName("project_id", project); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// normalize validates q and fills its defaults.
func normalize(q ListQuery) (ListQuery, error) {
	if q.AgentID == "" {
		return q, fmt.Errorf("%w: agent_id is required", ErrInvalid)
	}
	if err := card.ValidateName("agent_id", q.AgentID); err != nil {
		return q, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if q.State == "" {
		q.State = StatePending
	}
	if !q.State.Valid() && q.State != StateAll {
		return q, fmt.Errorf("%w: state %q is not pending, acked, stale or all", ErrInvalid, q.State)
	}
	if q.Limit < 0 {
		return q, fmt.Errorf("%w: limit %d is negative", ErrInvalid, q.Limit)
	}
	if q.Limit == 0 || q.Limit > MaxList {
		q.Limit = MaxList
	}
	if q.After != "" && !card.ValidID(q.After) {
		return q, fmt.Errorf("%w: after %q is not an inbox_id (a canonical lower-case UUID)", ErrInvalid, q.After)
	}
	return q, nil
}

func checkInboxID(field, id string) error {
	if !card.ValidID(id) {
		return fmt.Errorf("%w: %s %q is not an inbox_id (a canonical lower-case UUID)", ErrInvalid, field, id)
	}
	return nil
}

func checkTurn(turn string, epoch int64) error {
	if turn == "" {
		return fmt.Errorf("%w: agent_turn_id is required", ErrInvalid)
	}
	if len(turn) > card.MaxIDLen {
		return fmt.Errorf("%w: agent_turn_id is longer than %d bytes", ErrInvalid, card.MaxIDLen)
	}
	if epoch < 0 {
		return fmt.Errorf("%w: turn_epoch %d is negative", ErrInvalid, epoch)
	}
	return nil
}

// List returns the agent's entries in the project that match q, in
// creation order. Pending entries come from an index of their own, so
// listing them does not read the agent's acknowledged history.
func (s *Service) List(ctx context.Context, project string, q ListQuery) ([]Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkProject(project); err != nil {
		return nil, err
	}
	q, err := normalize(q)
	if err != nil {
		return nil, err
	}
	return s.st.list(project, q)
}

// Get returns the entry inboxID of the project, or ErrNotFound.
func (s *Service) Get(ctx context.Context, project, inboxID string) (*Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkProject(project); err != nil {
		return nil, err
	}
	if err := checkInboxID("inbox_id", inboxID); err != nil {
		return nil, err
	}
	return s.st.get(project, inboxID)
}

// Ack marks the given entries of the project acked, atomically, and returns
// how many were pending before. Acking an acked or stale entry changes
// nothing and is not an error; an id with no entry in the project fails the
// whole call with ErrNotFound naming it.
func (s *Service) Ack(ctx context.Context, project string, inboxIDs ...string) (int, error) {
	return s.ack(ctx, project, inboxIDs, false)
}

// AckLazy is Ack replying before the ack is on disk: the ids are checked
// and the pending ones counted now, and the ack rides along with the
// inbox's next transaction (see API.AckLazy).
func (s *Service) AckLazy(ctx context.Context, project string, inboxIDs ...string) (int, error) {
	return s.ack(ctx, project, inboxIDs, true)
}

func (s *Service) ack(ctx context.Context, project string, inboxIDs []string, lazy bool) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := checkProject(project); err != nil {
		return 0, err
	}
	if len(inboxIDs) == 0 {
		return 0, fmt.Errorf("%w: inbox_ids is empty", ErrInvalid)
	}
	if len(inboxIDs) > MaxAck {
		return 0, fmt.Errorf("%w: %d inbox_ids in one ack, the limit is %d", ErrInvalid, len(inboxIDs), MaxAck)
	}
	seen := make(map[string]bool, len(inboxIDs))
	ids := make([]string, 0, len(inboxIDs))
	for i, id := range inboxIDs {
		if err := checkInboxID(fmt.Sprintf("inbox_ids[%d]", i), id); err != nil {
			return 0, err
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if lazy {
		n, err := s.st.ackLater(project, ids, time.Now(), func(err error) {
			if err != nil {
				s.log.Warn("inbox: lazy ack not written; the entries stay pending", "project_id", project, "inbox_ids", listIDs(ids), "err", err)
			}
		})
		if err != nil {
			return 0, err
		}
		s.log.Debug("inbox: entries acked (lazy)", "project_id", project, "requested", len(ids), "pending", n)
		return n, nil
	}
	n, err := s.st.ack(project, ids, time.Now())
	if err != nil {
		return 0, err
	}
	s.log.Debug("inbox: entries acked", "project_id", project, "requested", len(ids), "acked", n)
	return n, nil
}

// SetEpoch declares epoch as the current epoch of the project's turn
// agentTurnID. Epochs never go down: a lower epoch changes nothing. Raising
// the epoch makes later reports of older epochs stale, and turns the turn's
// pending entries of older epochs stale too. It returns the turn's highest
// epoch after the call.
func (s *Service) SetEpoch(ctx context.Context, project, agentTurnID string, epoch int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := checkProject(project); err != nil {
		return 0, err
	}
	if err := checkTurn(agentTurnID, epoch); err != nil {
		return 0, err
	}
	highest, staled, err := s.st.setEpoch(project, agentTurnID, epoch)
	if err != nil {
		return 0, err
	}
	for _, e := range staled {
		s.log.Info("inbox: pending entry made stale by a newer epoch", "project_id", project, "inbox_id", e.InboxID,
			"agent_id", e.AgentID, "agent_turn_id", e.AgentTurnID, "tool_call_id", e.ToolCallID,
			"turn_epoch", e.TurnEpoch, "highest_epoch", highest)
	}
	return highest, nil
}

func (s *Service) handleList(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req listRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	es, err := s.List(ctx, sc.Project, req)
	if err != nil {
		return nil, err
	}
	return listReply{Entries: es}, nil
}

func (s *Service) handleGet(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req getRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	e, err := s.Get(ctx, sc.Project, req.InboxID)
	if err != nil {
		return nil, err
	}
	return getReply{Entry: e}, nil
}

func (s *Service) handleAck(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req ackRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	n, err := s.ack(ctx, sc.Project, req.InboxIDs, req.Lazy)
	if err != nil {
		return nil, err
	}
	return ackReply{Acked: n}, nil
}

func (s *Service) handleSetEpoch(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req setEpochRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	if req.TurnEpoch == nil {
		return nil, fmt.Errorf("%w: turn_epoch is required", ErrInvalid)
	}
	n, err := s.SetEpoch(ctx, sc.Project, req.AgentTurnID, *req.TurnEpoch)
	if err != nil {
		return nil, err
	}
	return setEpochReply{TurnEpoch: n}, nil
}

// decode is svc.Decode reporting a malformed body as ErrInvalid too.
func decode(data []byte, v any) error {
	if err := svc.Decode(data, v); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}
