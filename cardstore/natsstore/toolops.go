package natsstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/audit"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// ToolStore is what a Server needs of its store to serve the tool-scoped
// writes of workers; tool is a tool token (subjects.ToolToken).
// cardstore/boltstore and cardstore/jsstore implement it with the claim
// check and the write in one transaction (jsstore: one atomic batch); for
// a store that does not, the Server checks on top of cardstore.Store (see
// genericTools: the check precedes the write).
type ToolStore interface {
	// ClaimTool is Claim for a worker of tool.
	ClaimTool(ctx context.Context, req cardstore.ClaimRequest, tool string) (*cardstore.Claim, error)
	// StartCallTool is StartCall for a worker of tool, with ClaimTool's
	// rules for the claim.
	StartCallTool(ctx context.Context, req cardstore.StartCallRequest, tool string) (*cardstore.StartCallResult, error)
	// ReleaseTool is Release of a claim taken for tool.
	ReleaseTool(ctx context.Context, projectID, key, holder, tool string) error
	// PutToolResult writes tool.result cards of tool under the claim
	// (holder, token).
	PutToolResult(ctx context.Context, tool, holder string, token uint64, cards ...*card.Card) error
}

// entryToolStore is a ToolStore whose PutToolResult can say that the
// commit also stored the call's inbox entry (cardstore.EntryPutter's
// answer, for a worker's put_result): cardstore/boltstore with a result
// hook. The put_result reply carries it as inbox_entry.
type entryToolStore interface {
	PutToolResultEntry(ctx context.Context, tool, holder string, token uint64, cards ...*card.Card) (bool, error)
}

// toolOps serves cg.<ver>.*.*.svc.cardstore.<op>.<tool>: start_call,
// claim, release and put_result of a tool's workers. The subject's tool is what a NATS
// permission let the requester publish (internal/meshauth), so the store
// can check it against the call, its card and its claim.
type toolOps struct {
	s  *Server
	ts ToolStore
}

// toolOps returns the handler of the tool-scoped operations: the store's
// own ToolStore, else checks on top of cardstore.Store (genericTools).
func (s *Server) toolOps() *toolOps {
	ts, ok := s.store.(ToolStore)
	if !ok {
		ts = genericTools{st: s.store}
	}
	return &toolOps{s: s, ts: ts}
}

// serve runs one request and audits a forbidden one. The agent-scoped
// operations (AgentOps) share the subjects' shape and go to agentOp.
func (t *toolOps) serve(ctx context.Context, ts subjects.ToolSubject, data []byte) (any, error) {
	if isAgentOp(ts.Op) {
		return t.s.agentOp(ctx, ts, data)
	}
	reply, info, err := t.do(ctx, ts, data)
	if errors.Is(err, cardstore.ErrForbidden) {
		t.s.log.Warn("cardstore: tool-scoped write refused", "subject", ts.String(), "err", err)
		t.audit(ts, err, info)
	}
	return reply, err
}

// do runs one tool-scoped operation; info names the call for the audit.
func (t *toolOps) do(ctx context.Context, ts subjects.ToolSubject, data []byte) (any, map[string]string, error) {
	info := map[string]string{"tool": ts.Tool}
	switch ts.Op {
	case OpClaimKey, OpReleaseKey, OpGetClaim:
		return t.lease(ctx, ts, data, info)
	case OpClaim, OpRelease:
		var req claimRequest
		if err := decode(data, &req); err != nil {
			return nil, info, err
		}
		info["key"], info["holder"] = req.Key, req.Holder
		if ts.Op == OpRelease {
			if err := t.ts.ReleaseTool(ctx, ts.Project, req.Key, req.Holder, ts.Tool); err != nil {
				return nil, info, err
			}
			return emptyReply{}, info, nil
		}
		c, err := t.ts.ClaimTool(ctx, cardstore.ClaimRequest{
			ProjectID: ts.Project, Key: req.Key, Holder: req.Holder, Lease: time.Duration(req.LeaseMS) * time.Millisecond,
		}, ts.Tool)
		var held *cardstore.ClaimHeldError
		if errors.As(err, &held) {
			return nil, info, svc.WithDetail(err, claimHeldDetail{Holder: held.Holder, ExpiresAt: held.ExpiresAt})
		}
		if err != nil {
			return nil, info, err
		}
		return claimReply{Claim: c}, info, nil
	case OpStartCall:
		var req startCallRequest
		if err := decode(data, &req); err != nil {
			return nil, info, err
		}
		info["key"], info["holder"] = cardstore.CallKey{AgentTurnID: req.AgentTurnID, ToolCallID: req.ToolCallID}.String(), req.Holder
		info["agent_turn_id"], info["tool_call_id"], info["card_id"] = req.AgentTurnID, req.ToolCallID, req.ToolCallCardID
		out, err := t.ts.StartCallTool(ctx, cardstore.StartCallRequest{
			ProjectID: ts.Project, AgentTurnID: req.AgentTurnID, ToolCallID: req.ToolCallID, ToolCallCardID: req.ToolCallCardID,
			Holder: req.Holder, Lease: time.Duration(req.LeaseMS) * time.Millisecond,
		}, ts.Tool)
		var held *cardstore.ClaimHeldError
		if errors.As(err, &held) {
			return nil, info, svc.WithDetail(err, claimHeldDetail{Holder: held.Holder, ExpiresAt: held.ExpiresAt})
		}
		if err != nil {
			return nil, info, err
		}
		return out, info, nil
	case OpPutResult:
		var req putRequest
		if err := decode(data, &req); err != nil {
			return nil, info, err
		}
		if err := checkCards(req.Cards, ts.Project); err != nil {
			return nil, info, err
		}
		for _, c := range req.Cards {
			if c.Type == card.TypeToolResult {
				info["tool_call_id"], info["agent_turn_id"], info["card_id"] = c.ToolCallID, c.Metadata.AgentTurnID, c.CardID
				info["function_name"] = c.Metadata.FunctionName
			}
		}
		var claim claimRef // none: the store refuses after its tool checks
		if req.Claim != nil {
			claim = *req.Claim
		}
		info["holder"] = claim.Holder
		if ets, ok := t.ts.(entryToolStore); ok {
			entry, err := ets.PutToolResultEntry(ctx, ts.Tool, claim.Holder, claim.Token, req.Cards...)
			if err != nil {
				return nil, info, err
			}
			return putReply{Count: len(req.Cards), InboxEntry: entry}, info, nil
		}
		if err := t.ts.PutToolResult(ctx, ts.Tool, claim.Holder, claim.Token, req.Cards...); err != nil {
			return nil, info, err
		}
		return putReply{Count: len(req.Cards)}, info, nil
	}
	return nil, info, fmt.Errorf("%w: %s has no tool-scoped operation %q (want %s, %s, %s, %s, %s, %s or %s; an agent's: %s)", svc.ErrBadRequest, ServiceName, ts.Op,
		OpStartCall, OpClaim, OpRelease, OpPutResult, OpClaimKey, OpReleaseKey, OpGetClaim, strings.Join(AgentOps, ", "))
}

// lease serves claim_key, release_key and get_claim on a service's
// subject (svc.cardstore.<op>.<ToolToken(service)>): only keys
// <service>/… of that service, never a tool call's.
func (t *toolOps) lease(ctx context.Context, ts subjects.ToolSubject, data []byte, info map[string]string) (any, map[string]string, error) {
	info["service"] = ts.Tool
	delete(info, "tool")
	var req claimRequest
	if err := svc.Decode(data, &req); err != nil {
		return nil, info, err
	}
	info["key"], info["holder"] = req.Key, req.Holder
	owner, err := LeaseOwner(req.Key)
	if isToolCallKey(req.Key) || err != nil || subjects.ToolToken(owner) != ts.Tool {
		return nil, info, fmt.Errorf("%w: key %q is not in the lease namespace of this subject's service (%s): a service leases only keys <service>/… of its own",
			cardstore.ErrForbidden, req.Key, ts.Tool)
	}
	sc := svc.Scope{Version: ts.Version, Project: ts.Project, Channel: ts.Channel, Op: ts.Op}
	var reply any
	switch ts.Op {
	case OpClaimKey:
		reply, err = t.s.claim(ctx, sc, data)
	case OpReleaseKey:
		reply, err = t.s.release(ctx, sc, data)
	default:
		reply, err = t.s.getClaim(ctx, sc, data)
	}
	return reply, info, err
}

// notToolCall refuses a request whose key is a tool call's: claim_key and
// release_key are for other leases.
func notToolCall(h svc.HandlerFunc) svc.HandlerFunc {
	return func(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
		var req claimRequest
		if err := decode(data, &req); err != nil {
			return nil, err
		}
		if isToolCallKey(req.Key) {
			return nil, fmt.Errorf("%w: key %q is a tool call's: claim and release it on the tool's subject (svc.cardstore.%s.<tool>), not with %s",
				cardstore.ErrForbidden, req.Key, OpClaim, sc.Op)
		}
		return h(ctx, sc, data)
	}
}

// isToolCallKey reports whether key is in the namespace of tool calls'
// keys (cardstore.CallKeyPrefix), whether or not it parses.
func isToolCallKey(key string) bool { return strings.HasPrefix(key, cardstore.CallKeyPrefix) }

// checkCards refuses an empty batch, a null card and a card of another
// project than the subject's.
func checkCards(cards []*card.Card, project string) error {
	if len(cards) == 0 {
		return fmt.Errorf("%w: cards is empty", cardstore.ErrInvalid)
	}
	for i, c := range cards {
		if c == nil {
			return fmt.Errorf("%w: cards[%d] is null", cardstore.ErrInvalid, i)
		}
		if c.ProjectID != project {
			return fmt.Errorf("%w: cards[%d] (%s) belongs to project %q, but the request was sent on project %q's subject",
				cardstore.ErrInvalid, i, c.CardID, c.ProjectID, project)
		}
	}
	return nil
}

// audit records a refused tool-scoped write on evt.sys.audit.cardstore.
func (t *toolOps) audit(ts subjects.ToolSubject, err error, info map[string]string) {
	t.s.srv.Audit(audit.Record{
		Service: ServiceName, Op: ts.Op, Project: ts.Project, Channel: ts.Channel,
		Actor: "tool:" + ts.Tool, Code: svc.CodeOf(Codes, err), Reason: err.Error(), Subject: ts.String(), Detail: info,
	})
}
