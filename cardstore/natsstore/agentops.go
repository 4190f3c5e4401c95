package natsstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/audit"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// AgentOps are the operations an agent runtime sends on its agent's own
// subject, cg.<ver>.<project>.<channel>.svc.cardstore.<op>.<agent>
// (subjects.AgentService; the agent token is subjects.ToolToken of the
// agent id). A per-agent identity may publish only its own agent's
// (internal/meshauth), and the server serves only that agent's cards:
//
//   - a card is the agent's when its metadata.agent_id names the agent
//     (its own calls and their results, wherever they are: the admission
//     may put an agent's call into another agent's turn, e.g. a
//     confirmation) or when it is in one of the agent's turns
//     (cardstore.TurnAgent: the agent_id of the turn's first card that
//     names one);
//   - put: every card must name the agent (metadata.agent_id) and its turn
//     must be new or the agent's; tool.result cards are refused as on the
//     plain put (wrong_op);
//   - get, get_many, find_result, list_turn: the cards and turns must be
//     the agent's (a turn with no card yet reads as empty);
//   - list_turns: only the agent's turns (agent_id defaults to the agent;
//     another agent's id is refused);
//   - box_create, box_append, box_get: every card the box holds or is
//     given must be the agent's.
//
// Anything else is refused with cardstore.ErrForbidden (wire code
// forbidden), audited on evt.sys.audit.cardstore with actor
// "agent:<agent token>". None of them is also a tool-scoped operation
// (start_call, claim, release, put_result, claim_key, release_key,
// get_claim), so the subject's last token is read as an agent for these
// ops only.
var AgentOps = []string{OpPut, OpGet, OpGetMany, OpListTurn, OpFindResult, OpBoxCreate, OpBoxAppend, OpBoxGet, OpListTurns}

// isAgentOp reports whether op is one of AgentOps.
func isAgentOp(op string) bool { return slices.Contains(AgentOps, op) }

// agentScope is one agent-scoped request being served: its subject and
// the turns' agents it has looked up.
type agentScope struct {
	s      *Server
	ts     subjects.ToolSubject
	owners map[string]string // agent_turn_id → its agent ("" none)
	empty  map[string]bool   // agent_turn_ids with no card
	info   map[string]string
}

// agentOp serves one agent-scoped request and audits a refusal.
func (s *Server) agentOp(ctx context.Context, ts subjects.ToolSubject, data []byte) (any, error) {
	a := &agentScope{s: s, ts: ts, owners: map[string]string{}, empty: map[string]bool{}, info: map[string]string{"agent": ts.Tool}}
	reply, err := a.do(ctx, data)
	if errors.Is(err, cardstore.ErrForbidden) {
		s.log.Warn("cardstore: agent-scoped request refused", "subject", ts.String(), "err", err)
		s.srv.Audit(audit.Record{Service: ServiceName, Op: ts.Op, Project: ts.Project, Channel: ts.Channel,
			Actor: "agent:" + ts.Tool, Code: svc.CodeOf(Codes, err), Reason: err.Error(), Subject: ts.String(), Detail: a.info})
	}
	return reply, err
}

func (a *agentScope) scope() svc.Scope {
	return svc.Scope{Version: a.ts.Version, Project: a.ts.Project, Channel: a.ts.Channel, Op: a.ts.Op}
}

func (a *agentScope) do(ctx context.Context, data []byte) (any, error) {
	st, project := a.s.store, a.ts.Project
	switch a.ts.Op {
	case OpPut:
		var req putRequest
		if err := decode(data, &req); err != nil {
			return nil, err
		}
		if err := checkCards(req.Cards, project); err != nil {
			return nil, err
		}
		if err := a.s.refuseResults(a.scope(), req.Cards); err != nil {
			return nil, err
		}
		for i, c := range req.Cards {
			if subjects.ToolToken(c.Metadata.AgentID) != a.ts.Tool || c.Metadata.AgentID == "" {
				a.info["card_id"] = c.CardID
				return nil, fmt.Errorf("%w: cards[%d] (%s) has metadata.agent_id %q: on svc.cardstore.put.%s every card names that agent",
					cardstore.ErrForbidden, i, c.CardID, c.Metadata.AgentID, a.ts.Tool)
			}
			if c.Metadata.AgentTurnID != "" {
				if err := a.checkTurn(ctx, c.Metadata.AgentTurnID, true); err != nil {
					a.info["card_id"] = c.CardID
					return nil, fmt.Errorf("cards[%d] (%s): %w", i, c.CardID, err)
				}
			}
		}
		if err := st.Put(ctx, req.Cards...); err != nil {
			return nil, err
		}
		return putReply{Count: len(req.Cards)}, nil
	case OpGet:
		var req getRequest
		if err := decode(data, &req); err != nil {
			return nil, err
		}
		c, err := st.Get(ctx, project, req.CardID)
		if err != nil {
			return nil, err
		}
		if err := a.checkCards(ctx, []*card.Card{c}); err != nil {
			return nil, err
		}
		return cardReply{Card: c}, nil
	case OpGetMany:
		var req getManyRequest
		if err := decode(data, &req); err != nil {
			return nil, err
		}
		res, err := st.GetMany(ctx, project, req.CardIDs)
		if err != nil {
			return nil, err
		}
		if err := a.checkCards(ctx, res.Cards); err != nil {
			return nil, err
		}
		return res, nil
	case OpListTurn:
		var req listTurnRequest
		if err := decode(data, &req); err != nil {
			return nil, err
		}
		if err := a.checkTurn(ctx, req.AgentTurnID, false); err != nil {
			return nil, err
		}
		return a.s.listTurn(ctx, a.scope(), data)
	case OpFindResult:
		var req findResultRequest
		if err := decode(data, &req); err != nil {
			return nil, err
		}
		if err := a.checkTurn(ctx, req.AgentTurnID, false); err != nil {
			return nil, err
		}
		return a.s.findResult(ctx, a.scope(), data)
	case OpListTurns:
		var req listTurnsRequest
		if err := decode(data, &req); err != nil {
			return nil, err
		}
		switch {
		case req.AgentID == "":
			req.AgentID = a.ts.Tool // agent ids are subject tokens: the token is the id
		case subjects.ToolToken(req.AgentID) != a.ts.Tool:
			return nil, fmt.Errorf("%w: list_turns of agent_id %q on svc.cardstore.list_turns.%s: an agent lists its own turns only (leave agent_id empty)",
				cardstore.ErrForbidden, req.AgentID, a.ts.Tool)
		}
		return st.ListTurns(ctx, cardstore.ListTurnsRequest{ProjectID: project, AgentID: req.AgentID, Before: req.Before, Limit: req.Limit})
	case OpBoxCreate, OpBoxAppend, OpBoxGet:
		return a.box(ctx, data)
	}
	return nil, fmt.Errorf("%w: %s has no agent-scoped operation %q", svc.ErrBadRequest, ServiceName, a.ts.Op)
}

// box serves box_create, box_append and box_get: every card the box holds
// or is given must be the agent's.
func (a *agentScope) box(ctx context.Context, data []byte) (any, error) {
	var req boxRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	st, project := a.s.store, a.ts.Project
	a.info["box_id"] = req.BoxID
	if a.ts.Op != OpBoxCreate {
		b, err := st.GetBox(ctx, project, req.BoxID)
		if err != nil {
			return nil, err
		}
		if err := a.checkIDs(ctx, b.CardIDs); err != nil {
			return nil, fmt.Errorf("box %s: %w", req.BoxID, err)
		}
		if a.ts.Op == OpBoxGet {
			return boxReply{Box: b}, nil
		}
	}
	if err := a.checkIDs(ctx, req.CardIDs); err != nil {
		return nil, err
	}
	var b *card.Box
	var err error
	if a.ts.Op == OpBoxCreate {
		b, err = st.CreateBox(ctx, project, req.BoxID, req.CardIDs)
	} else {
		b, err = st.AppendBox(ctx, project, req.BoxID, req.CardIDs)
	}
	if err != nil {
		return nil, err
	}
	return boxReply{Box: b}, nil
}

// checkIDs checks that the cards named by ids are the agent's; ids with no
// card are left to the store (a box refuses them with not_found).
func (a *agentScope) checkIDs(ctx context.Context, ids []string) error {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	for len(ids) > 0 {
		n := min(len(ids), cardstore.MaxBatch)
		res, err := a.s.store.GetMany(ctx, a.ts.Project, ids[:n])
		if err != nil {
			return err
		}
		if err := a.checkCards(ctx, res.Cards); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

// checkCards refuses the first card that is not the agent's: a card is
// the agent's when it names the agent or is in one of the agent's turns.
func (a *agentScope) checkCards(ctx context.Context, cards []*card.Card) error {
	for _, c := range cards {
		if c.Metadata.AgentID != "" && subjects.ToolToken(c.Metadata.AgentID) == a.ts.Tool {
			continue
		}
		var agent string
		if turn := c.Metadata.AgentTurnID; turn != "" {
			var err error
			if agent, err = a.turnAgent(ctx, turn); err != nil {
				return err
			}
		}
		if agent == "" || subjects.ToolToken(agent) != a.ts.Tool {
			a.info["card_id"] = c.CardID
			return fmt.Errorf("%w: card %s is not agent %s's (it neither names the agent nor is in one of its turns): on svc.cardstore.%s.%s an agent reads only its own cards",
				cardstore.ErrForbidden, c.CardID, a.ts.Tool, a.ts.Op, a.ts.Tool)
		}
	}
	return nil
}

// checkTurn refuses a turn of another agent, or one whose cards name no
// agent. A turn with no card is the agent's to start (write) or reads as
// empty.
func (a *agentScope) checkTurn(ctx context.Context, turn string, write bool) error {
	if turn == "" || a.empty[turn] {
		return nil // no turn (the store refuses a missing agent_turn_id), or one with no card
	}
	if _, seen := a.owners[turn]; !seen {
		agent, found, err := cardstore.TurnAgent(ctx, a.s.store, a.ts.Project, turn)
		if errors.Is(err, cardstore.ErrInvalid) {
			return err
		}
		if err != nil {
			return fmt.Errorf("cardstore: look up the agent of turn %q: %w", turn, err)
		}
		if !found {
			a.empty[turn] = true
			return nil
		}
		a.owners[turn] = agent
	}
	if agent := a.owners[turn]; agent == "" || subjects.ToolToken(agent) != a.ts.Tool {
		a.info["agent_turn_id"] = turn
		verb := "reads"
		if write {
			verb = "writes"
		}
		return fmt.Errorf("%w: turn %q is not agent %s's: on svc.cardstore.%s.%s an agent %s only its own turns (start a turn with a new agent_turn_id)",
			cardstore.ErrForbidden, turn, a.ts.Tool, a.ts.Op, a.ts.Tool, verb)
	}
	return nil
}

// turnAgent returns the agent of a turn the request reads a card of.
func (a *agentScope) turnAgent(ctx context.Context, turn string) (string, error) {
	if agent, ok := a.owners[turn]; ok {
		return agent, nil
	}
	agent, _, err := cardstore.TurnAgent(ctx, a.s.store, a.ts.Project, turn)
	if err != nil {
		return "", fmt.Errorf("cardstore: look up the agent of turn %q: %w", turn, err)
	}
	a.owners[turn] = agent
	return agent, nil
}
