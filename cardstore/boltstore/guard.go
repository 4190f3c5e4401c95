package boltstore

import (
	"context"
	"fmt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// Tool-scoped writes: what natsstore serves on a tool's own subjects
// (svc.cardstore.<op>.<tool>), where a NATS permission proves the
// requester may act for that tool. tool is always a tool token
// (subjects.ToolToken of a tool name). See docs/security.md, "Results
// only from the tool that ran".

// ClaimTool is Claim for a worker of tool: when the call's tool.call card
// exists (the key is a cardstore.CallKey) it must call tool, else the
// claim fails with cardstore.ErrForbidden; the claim records tool, so only
// a worker of the same tool may renew or release it, or write the call's
// result under it (PutToolResult).
func (s *Store) ClaimTool(ctx context.Context, req cardstore.ClaimRequest, tool string) (*cardstore.Claim, error) {
	if err := cardstore.CheckProject(req.ProjectID); err != nil {
		return nil, err
	}
	if err := cardstore.CheckKeyCallsTool(req.Key, req.ProjectID, tool, func(turn, call string) (*card.Card, error) {
		return s.FindToolCall(ctx, req.ProjectID, turn, call)
	}); err != nil {
		return nil, err
	}
	return s.claim(ctx, req, tool)
}

// ReleaseTool is Release of a claim taken with ClaimTool for tool; a claim
// of another tool (or of the core) is cardstore.ErrForbidden.
func (s *Store) ReleaseTool(ctx context.Context, projectID, key, holder, tool string) error {
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
// cardstore.ErrClaimLost. The claim check and the write are one
// transaction. A lapsed lease nobody took over still counts as held, as
// for a renewal.
func (s *Store) PutToolResult(ctx context.Context, tool, holder string, token uint64, cards ...*card.Card) error {
	_, err := s.PutToolResultEntry(ctx, tool, holder, token, cards...)
	return err
}

// PutToolResultEntry is PutToolResult that says whether the commit also
// stored the inbox entry of the cards' tool.result, as PutWithEntry does
// (cardstore/natsstore answers a worker's put_result with it).
func (s *Store) PutToolResultEntry(ctx context.Context, tool, holder string, token uint64, cards ...*card.Card) (bool, error) {
	if err := checkCtx(ctx); err != nil {
		return false, err
	}
	if len(cards) == 0 {
		return false, nil
	}
	if err := cardstore.CheckPutBatch(len(cards)); err != nil {
		return false, err
	}
	pcs, size, err := s.preparePut(cards)
	if err != nil {
		return false, err
	}
	type fence struct {
		pc  int    // index in pcs
		key []byte // project 0x00 claim key
	}
	var fences []fence
	for i, c := range cards {
		if c.Type != card.TypeToolResult {
			continue
		}
		if err := cardstore.CheckResultTool(c, tool); err != nil {
			return false, err
		}
		if err := s.checkCallTool(ctx, c.ProjectID, c.Metadata.AgentTurnID, c.ToolCallID, tool); err != nil {
			return false, err
		}
		fences = append(fences, fence{pc: i, key: join(0, c.ProjectID, pcs[i].Key().String())})
	}
	run := s.hookRun()
	err = run.finish(s.writeResults(ctx, pcs, size, func(b *buckets) error {
		for _, f := range fences {
			pc := &pcs[f.pc]
			if b.recs.Get(pc.resultKey) != nil {
				continue // answered already: applyPut decides (no-op or ErrResultExists)
			}
			rec, err := b.currentClaim(f.key, cardstore.ClaimName(pc.ProjectID, pc.Key().String()))
			if err != nil {
				return err
			}
			if err := s.checkResultFence(rec, pc.ProjectID, pc.Key(), tool, holder, token); err != nil {
				return err
			}
		}
		return nil
	}, run))
	if err != nil {
		return false, err
	}
	return run.entries(pcs), nil
}

// checkResultFence is cardstore.CheckResultFence, except that after a
// restart that may have lost in-memory claims, a result under a claim the
// store does not know is ErrClaimLost (the worker retries, and its next
// delivery finds the call's state) rather than ErrForbidden.
func (s *Store) checkResultFence(rec *claimRecord, projectID string, k cardstore.CallKey, tool, holder string, token uint64) error {
	if rec == nil && holder != "" && s.boots.unclean {
		return fmt.Errorf("%w: the result was written under the claim of %s with token %d, but the call %q in project %s has no claim: the store restarted (boot epoch %d) and a claim it kept in memory is lost",
			cardstore.ErrClaimLost, holder, token, k.String(), projectID, s.boots.epoch)
	}
	return cardstore.CheckResultFence(rec, projectID, k, tool, holder, token)
}

// checkCallTool fails with ErrForbidden when the call's tool.call card
// exists and calls another tool than tool. Cards are immutable, so a read
// outside the write is enough.
func (s *Store) checkCallTool(ctx context.Context, projectID, turn, call, tool string) error {
	c, err := s.FindToolCall(ctx, projectID, turn, call)
	return cardstore.CheckCallCardTool(c, err, projectID, turn, call, tool)
}

// FindToolCall returns the tool.call card of (agent_turn_id, tool_call_id)
// in the project, the first one written if there are several, or an error
// wrapping cardstore.ErrNotFound. The first card is the one the call's
// agent wrote before publishing the command; a later one (a re-dispatch,
// or a card another tool's worker wrote to take the call over) does not
// change which tool the call is. It reads the turn's cards oldest first,
// up to the call's first card, and checks ctx between cards.
func (s *Store) FindToolCall(ctx context.Context, projectID, agentTurnID, toolCallID string) (*card.Card, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := cardstore.CheckTurn(projectID, agentTurnID); err != nil {
		return nil, err
	}
	found, _, err := s.findToolCall(ctx, projectID, agentTurnID, toolCallID)
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, cardstore.CallNotFound(projectID, agentTurnID, toolCallID)
	}
	return found, nil
}
