package inboxsvc

import (
	"context"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

var _ inbox.API = (*Service)(nil)

// List returns the agent's entries in the project that match q, in
// creation order. Pending entries come from an index of their own, so
// listing them does not read the agent's acknowledged history.
func (s *Service) List(ctx context.Context, project string, q inbox.ListQuery) ([]inbox.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := inbox.CheckProject(project); err != nil {
		return nil, err
	}
	q, err := q.Normalize()
	if err != nil {
		return nil, err
	}
	st, err := s.backend()
	if err != nil {
		return nil, err
	}
	return st.List(ctx, project, q)
}

// Get returns the entry inboxID of the project, or ErrNotFound.
func (s *Service) Get(ctx context.Context, project, inboxID string) (*inbox.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := inbox.CheckProject(project); err != nil {
		return nil, err
	}
	if err := inbox.CheckInboxID("inbox_id", inboxID); err != nil {
		return nil, err
	}
	st, err := s.backend()
	if err != nil {
		return nil, err
	}
	return st.Get(ctx, project, inboxID)
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
// inbox's next transaction (see inbox.API.AckLazy).
func (s *Service) AckLazy(ctx context.Context, project string, inboxIDs ...string) (int, error) {
	return s.ack(ctx, project, inboxIDs, true)
}

func (s *Service) ack(ctx context.Context, project string, inboxIDs []string, lazy bool) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := inbox.CheckProject(project); err != nil {
		return 0, err
	}
	if len(inboxIDs) == 0 {
		return 0, fmt.Errorf("%w: inbox_ids is empty", inbox.ErrInvalid)
	}
	if len(inboxIDs) > inbox.MaxAck {
		return 0, fmt.Errorf("%w: %d inbox_ids in one ack, the limit is %d", inbox.ErrInvalid, len(inboxIDs), inbox.MaxAck)
	}
	seen := make(map[string]bool, len(inboxIDs))
	ids := make([]string, 0, len(inboxIDs))
	for i, id := range inboxIDs {
		if err := inbox.CheckInboxID(fmt.Sprintf("inbox_ids[%d]", i), id); err != nil {
			return 0, err
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	st, err := s.backend()
	if err != nil {
		return 0, err
	}
	if lazy {
		n, err := st.AckLater(ctx, project, ids, time.Now(), func(err error) {
			if err != nil {
				s.log.Warn("inbox: lazy ack not written; the entries stay pending", "project_id", project, "inbox_ids", inbox.JoinIDs(ids), "err", err)
			}
		})
		if err != nil {
			return 0, err
		}
		s.log.Debug("inbox: entries acked (lazy)", "project_id", project, "requested", len(ids), "pending", n)
		return n, nil
	}
	n, err := st.Ack(ctx, project, ids, time.Now())
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
	if err := inbox.CheckProject(project); err != nil {
		return 0, err
	}
	if err := inbox.CheckTurn(agentTurnID, epoch); err != nil {
		return 0, err
	}
	st, err := s.backend()
	if err != nil {
		return 0, err
	}
	highest, staled, err := st.SetEpoch(ctx, project, agentTurnID, epoch)
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

// DeleteTurn removes the project's turn agentTurnID from the inbox for
// retention: its acked and stale entries, its dedupe keys and its epoch
// (inbox.Backend's DeleteTurn). A pending entry fails it with
// inbox.ErrPending and removes nothing. It returns how many entries went.
func (s *Service) DeleteTurn(ctx context.Context, project, agentTurnID string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := inbox.CheckProject(project); err != nil {
		return 0, err
	}
	if err := inbox.CheckTurn(agentTurnID, 0); err != nil {
		return 0, err
	}
	st, err := s.backend()
	if err != nil {
		return 0, err
	}
	n, err := st.DeleteTurn(ctx, project, agentTurnID)
	if err != nil {
		return 0, err
	}
	s.log.Info("inbox: turn deleted", "project_id", project, "agent_turn_id", agentTurnID, "entries", n)
	return n, nil
}

func (s *Service) handleDeleteTurn(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req inbox.DeleteTurnRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	n, err := s.DeleteTurn(ctx, sc.Project, req.AgentTurnID)
	if err != nil {
		return nil, err
	}
	return inbox.DeleteTurnReply{Deleted: n}, nil
}

func (s *Service) handleList(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req inbox.ListQuery
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	es, err := s.List(ctx, sc.Project, req)
	if err != nil {
		return nil, err
	}
	return inbox.ListReply{Entries: es}, nil
}

func (s *Service) handleGet(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req inbox.GetRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	e, err := s.Get(ctx, sc.Project, req.InboxID)
	if err != nil {
		return nil, err
	}
	return inbox.GetReply{Entry: e}, nil
}

func (s *Service) handleAck(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req inbox.AckRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	n, err := s.ack(ctx, sc.Project, req.InboxIDs, req.Lazy)
	if err != nil {
		return nil, err
	}
	return inbox.AckReply{Acked: n}, nil
}

func (s *Service) handleSetEpoch(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req inbox.SetEpochRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	if req.TurnEpoch == nil {
		return nil, fmt.Errorf("%w: turn_epoch is required", inbox.ErrInvalid)
	}
	n, err := s.SetEpoch(ctx, sc.Project, req.AgentTurnID, *req.TurnEpoch)
	if err != nil {
		return nil, err
	}
	return inbox.SetEpochReply{TurnEpoch: n}, nil
}

// errBadBody is the sentinel of a malformed body: inbox.ErrInvalid and
// svc.ErrBadRequest.
var errBadBody = fmt.Errorf("%w: %w", inbox.ErrInvalid, svc.ErrBadRequest)

// decode is svc.Decode reporting a malformed body as inbox.ErrInvalid too.
func decode(data []byte, v any) error { return svc.DecodeAs(data, v, errBadBody) }
