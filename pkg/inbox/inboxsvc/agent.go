package inboxsvc

import (
	"context"
	"errors"
	"fmt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/audit"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// handleAgent serves the agent-scoped operations (inbox.AgentOps) on
// cg.<ver>.*.*.svc.inbox.<op>.<agent>: the subject's agent token is what a
// NATS permission let the requester publish, so only that agent's entries
// and turns are served. A refusal is inbox.ErrForbidden, logged and
// audited by srv (evt.sys.audit.inbox, actor "agent:<token>").
func (s *Service) handleAgent(ctx context.Context, srv *svc.Server, ts subjects.ToolSubject, data []byte) (any, error) {
	detail := map[string]string{"agent": ts.Tool}
	reply, err := s.agentOp(ctx, ts, data, detail)
	if errors.Is(err, inbox.ErrForbidden) {
		s.log.Warn("inbox: agent-scoped request refused", "subject", ts.String(), "err", err)
		srv.Audit(audit.Record{Service: inbox.ServiceName, Op: ts.Op, Project: ts.Project, Channel: ts.Channel,
			Actor: "agent:" + ts.Tool, Code: svc.CodeOf(inbox.Codes, err), Reason: err.Error(), Subject: ts.String(), Detail: detail})
	}
	return reply, err
}

func (s *Service) agentOp(ctx context.Context, ts subjects.ToolSubject, data []byte, detail map[string]string) (any, error) {
	sc := svc.Scope{Version: ts.Version, Project: ts.Project, Channel: ts.Channel, Op: ts.Op}
	switch ts.Op {
	case inbox.OpList:
		var q inbox.ListQuery
		if err := decode(data, &q); err != nil {
			return nil, err
		}
		switch {
		case q.AgentID == "":
			q.AgentID = ts.Tool // agent ids are subject tokens: the token is the id
		case subjects.ToolToken(q.AgentID) != ts.Tool:
			detail["agent_id"] = q.AgentID
			return nil, fmt.Errorf("%w: list of agent_id %q on svc.inbox.list.%s: an agent lists its own entries only (agent_id %q, or leave it empty)",
				inbox.ErrForbidden, q.AgentID, ts.Tool, ts.Tool)
		}
		es, err := s.List(ctx, ts.Project, q)
		if err != nil {
			return nil, err
		}
		return inbox.ListReply{Entries: es}, nil
	case inbox.OpGet:
		var req inbox.GetRequest
		if err := decode(data, &req); err != nil {
			return nil, err
		}
		e, err := s.Get(ctx, ts.Project, req.InboxID)
		if err != nil {
			return nil, err
		}
		if err := agentsEntry(ts, e, detail); err != nil {
			return nil, err
		}
		return inbox.GetReply{Entry: e}, nil
	case inbox.OpAck:
		var req inbox.AckRequest
		if err := decode(data, &req); err != nil {
			return nil, err
		}
		// An entry's agent never changes: checked here, acked below.
		for i, id := range req.InboxIDs {
			if err := inbox.CheckInboxID(fmt.Sprintf("inbox_ids[%d]", i), id); err != nil {
				return nil, err
			}
			e, err := s.Get(ctx, ts.Project, id)
			if err != nil {
				return nil, err
			}
			if err := agentsEntry(ts, e, detail); err != nil {
				return nil, err
			}
		}
		return s.handleAck(ctx, sc, data)
	case inbox.OpSetEpoch:
		var req inbox.SetEpochRequest
		if err := decode(data, &req); err != nil {
			return nil, err
		}
		if err := inbox.CheckTurn(req.AgentTurnID, 0); err != nil {
			return nil, err
		}
		agent, found, err := cardstore.TurnAgent(ctx, s.cfg.Store, ts.Project, req.AgentTurnID)
		if err != nil {
			return nil, fmt.Errorf("inbox: look up the agent of turn %q: %w", req.AgentTurnID, err)
		}
		if found && (agent == "" || subjects.ToolToken(agent) != ts.Tool) {
			detail["agent_turn_id"] = req.AgentTurnID
			return nil, fmt.Errorf("%w: turn %q is not agent %s's: on svc.inbox.set_epoch.%s an agent sets the epoch of its own turns only",
				inbox.ErrForbidden, req.AgentTurnID, ts.Tool, ts.Tool)
		}
		return s.handleSetEpoch(ctx, sc, data)
	}
	return nil, fmt.Errorf("%w: the inbox has no agent-scoped operation %q (want %s, %s, %s or %s)", errBadBody, ts.Op,
		inbox.OpList, inbox.OpGet, inbox.OpAck, inbox.OpSetEpoch)
}

// agentsEntry refuses an entry of another agent than the subject's.
func agentsEntry(ts subjects.ToolSubject, e *inbox.Entry, detail map[string]string) error {
	if subjects.ToolToken(e.AgentID) == ts.Tool {
		return nil
	}
	detail["inbox_id"] = e.InboxID
	return fmt.Errorf("%w: inbox entry %s is not agent %s's: on svc.inbox.%s.%s an agent reads and acks its own entries only",
		inbox.ErrForbidden, e.InboxID, ts.Tool, ts.Op, ts.Tool)
}
