package jsstore

import (
	"context"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// Tool-scoped writes: what natsstore serves on a tool's own subjects
// (svc.cardstore.<op>.<tool>), where a NATS permission proves the
// requester may act for that tool; tool is always a tool token
// (subjects.ToolToken of a tool name). The rules and their errors are
// boltstore's (cardstore/boltstore, guard.go); cardstore/storetest's
// RunTools checks both stores against them. See docs/security.md,
// "Results only from the tool that ran". StartCallTool is in startcall.go.

// ClaimTool is Claim for a worker of tool: when the call's tool.call card
// exists (the key is a cardstore.CallKey) it must call tool, else the
// claim fails with cardstore.ErrForbidden; the claim records tool, so only
// a worker of the same tool may renew or release it, or write the call's
// result under it (PutToolResult).
func (s *Store) ClaimTool(ctx context.Context, req cardstore.ClaimRequest, tool string) (*cardstore.Claim, error) {
	return s.checkedClaim(ctx, req, tool, func() error {
		return cardstore.CheckKeyCallsTool(req.Key, req.ProjectID, tool, func(turn, call string) (*card.Card, error) {
			return s.findToolCall(ctx, req.ProjectID, turn, call)
		})
	})
}

// ReleaseTool is Release of a claim taken with ClaimTool for tool; a claim
// of another tool (or of the core) is cardstore.ErrForbidden.
func (s *Store) ReleaseTool(ctx context.Context, projectID, key, holder, tool string) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	if err := cardstore.CheckRelease(projectID, key, holder); err != nil {
		return err
	}
	leave, err := s.enter()
	if err != nil {
		return err
	}
	defer leave()
	return s.release(ctx, projectID, key, holder, tool, true)
}

// PutToolResult is Put for a worker of tool writing a call's tool.result
// under the claim (holder, token) it holds. Each tool.result card of the
// batch must name tool in metadata.function_name, the call's tool.call
// card (when it exists) must call tool, and, unless the call already has
// a result (then Put's rules apply: an identical card is a no-op, another
// one ErrResultExists), the call's claim must be held by holder with the
// fencing token token and have been taken for tool (ClaimTool). A claim
// of another tool, or none, is cardstore.ErrForbidden; the same tool's
// claim under another holder or token (taken over) is
// cardstore.ErrClaimLost. A lapsed lease nobody took over still counts as
// held, as for a renewal.
//
// The claim check and the write are one atomic batch: the tombstone that
// ends the claim with the result is guarded by the sequence of the claim
// record that was checked, so a take-over (or any change of the claim)
// between the check and the write makes the batch fail; the Put then
// reads the claim again and is refused with ErrClaimLost, and the new
// holder keeps its claim. The same read decides whether the call already
// has a result: the batch expects the result record absent.
func (s *Store) PutToolResult(ctx context.Context, tool, holder string, token uint64, cards ...*card.Card) error {
	return s.put(ctx, cards, func() error {
		for _, c := range cards {
			if c.Type != card.TypeToolResult {
				continue
			}
			if err := cardstore.CheckResultTool(c, tool); err != nil {
				return err
			}
			if err := s.checkCallTool(ctx, c.ProjectID, c.Metadata.AgentTurnID, c.ToolCallID, tool); err != nil {
				return err
			}
		}
		return nil
	}, &fence{tool: tool, holder: holder, token: token})
}

// checkCallTool fails with ErrForbidden when the call's tool.call card
// exists and calls another tool than tool. Cards are immutable, so a read
// outside the write is enough.
func (s *Store) checkCallTool(ctx context.Context, projectID, turn, call, tool string) error {
	c, err := s.findToolCall(ctx, projectID, turn, call)
	return cardstore.CheckCallCardTool(c, err, projectID, turn, call, tool)
}

// FindToolCall returns the tool.call card of (agent_turn_id, tool_call_id)
// in the project, the first one written if there are several, or an error
// wrapping cardstore.ErrNotFound, as boltstore's: a later card (a
// re-dispatch, or one another tool's worker wrote to take the call over)
// does not change which tool the call is. It reads the turn oldest first
// up to the call's first card, so its cost grows with the turn.
func (s *Store) FindToolCall(ctx context.Context, projectID, agentTurnID, toolCallID string) (*card.Card, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := cardstore.CheckTurn(projectID, agentTurnID); err != nil {
		return nil, err
	}
	leave, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	return s.findToolCall(ctx, projectID, agentTurnID, toolCallID)
}

// findToolCall is FindToolCall after its checks.
func (s *Store) findToolCall(ctx context.Context, projectID, agentTurnID, toolCallID string) (*card.Card, error) {
	req := cardstore.ListTurnRequest{ProjectID: projectID, AgentTurnID: agentTurnID, Limit: cardstore.MaxPage}
	for {
		page, err := s.listTurn(ctx, req, cardstore.MaxPage)
		if err != nil {
			return nil, err
		}
		for _, c := range page.Cards {
			if c.Type == card.TypeToolCall && c.ToolCallID == toolCallID {
				return c, nil // the first written: see FindToolCall
			}
		}
		if page.Next == 0 {
			break
		}
		req.After = page.Next
	}
	return nil, cardstore.CallNotFound(projectID, agentTurnID, toolCallID)
}
