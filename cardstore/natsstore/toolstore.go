package natsstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// genericTools is the fallback ToolStore, over a cardstore.Store that does
// not implement ToolStore itself. The mesh's stores do (cardstore/boltstore
// and cardstore/jsstore, the replicated store of cluster mode, each with
// the claim check and the write in one transaction or atomic batch), so
// it serves only other stores: a natsstore.Client served again, a store of
// a test or of another program. The tool of a claim is kept in its holder
// ("tool:<tool>/<holder>"; jsstore reads claims of this form, which it
// wrote through here before it had ToolStore, as that tool's and holder's),
// and a result's claim is checked just before the write, not in the
// write, so a take-over in between can let the old holder's result be the
// call's one result. Replies show the holder without the prefix.
type genericTools struct{ st cardstore.Store }

var _ ToolStore = genericTools{}

// callFinder is the fast lookup of a call's tool.call card a store may have.
type callFinder interface {
	FindToolCall(ctx context.Context, projectID, agentTurnID, toolCallID string) (*card.Card, error)
}

const toolHolderPrefix = "tool:"

func toolHolder(tool, holder string) string { return toolHolderPrefix + tool + "/" + holder }

// splitHolder returns the tool and holder of a stored holder ("" tool for
// a claim taken without one).
func splitHolder(stored string) (tool, holder string) {
	if rest, ok := strings.CutPrefix(stored, toolHolderPrefix); ok {
		if i := strings.IndexByte(rest, '/'); i > 0 {
			return rest[:i], rest[i+1:]
		}
	}
	return "", stored
}

func (g genericTools) findCall(ctx context.Context, project, turn, call string) (*card.Card, error) {
	if f, ok := g.st.(callFinder); ok {
		return f.FindToolCall(ctx, project, turn, call)
	}
	cards, err := cardstore.AllTurn(ctx, g.st, project, turn)
	if err != nil {
		return nil, err
	}
	for _, c := range cards { // the first written, as the stores' FindToolCall
		if c.Type == card.TypeToolCall && c.ToolCallID == call {
			return c, nil
		}
	}
	return nil, fmt.Errorf("%w: no tool.call card for agent_turn_id %q, tool_call_id %q in project %s", cardstore.ErrNotFound, turn, call, project)
}

// checkCallTool is boltstore's: the call's tool.call card, when it
// exists, calls tool.
func (g genericTools) checkCallTool(ctx context.Context, project, turn, call, tool string) error {
	if turn == "" {
		return nil
	}
	c, err := g.findCall(ctx, project, turn, call)
	if errors.Is(err, cardstore.ErrInvalid) {
		return nil // an unreadable call id names no call
	}
	return cardstore.CheckCallCardTool(c, err, project, turn, call, tool)
}

// ClaimTool implements ToolStore.
func (g genericTools) ClaimTool(ctx context.Context, req cardstore.ClaimRequest, tool string) (*cardstore.Claim, error) {
	if err := cardstore.CheckKeyCallsTool(req.Key, req.ProjectID, tool, func(turn, call string) (*card.Card, error) {
		return g.findCall(ctx, req.ProjectID, turn, call)
	}); err != nil {
		return nil, err
	}
	if err := g.checkHolderTool(ctx, req.ProjectID, req.Key, req.Holder, tool); err != nil {
		return nil, err
	}
	raw := req
	raw.Holder = toolHolder(tool, req.Holder)
	c, err := g.st.Claim(ctx, raw)
	if err != nil {
		return nil, untoolHeld(err, req.ProjectID, req.Key)
	}
	return untool(c), nil
}

// StartCallTool implements ToolStore on top of the store's StartCall,
// with ClaimTool's checks (the call's tool.call card, the holder's tool)
// made first; a call that has a result returns it even when they refuse,
// as boltstore's StartCallTool does.
func (g genericTools) StartCallTool(ctx context.Context, req cardstore.StartCallRequest, tool string) (*cardstore.StartCallResult, error) {
	if err := cardstore.CheckStartCall(req); err != nil {
		return nil, err
	}
	key := cardstore.CallKey{AgentTurnID: req.AgentTurnID, ToolCallID: req.ToolCallID}.String()
	err := g.checkCallTool(ctx, req.ProjectID, req.AgentTurnID, req.ToolCallID, tool)
	if err == nil {
		err = g.checkHolderTool(ctx, req.ProjectID, key, req.Holder, tool)
	}
	if errors.Is(err, cardstore.ErrForbidden) {
		if res, ferr := g.st.FindToolResult(ctx, req.ProjectID, req.AgentTurnID, req.ToolCallID); ferr == nil {
			return &cardstore.StartCallResult{Result: res}, nil
		}
	}
	if err != nil {
		return nil, err
	}
	raw := req
	raw.Holder = toolHolder(tool, req.Holder)
	out, err := g.st.StartCall(ctx, raw)
	if err != nil {
		return nil, untoolHeld(err, req.ProjectID, key)
	}
	if out.Claim != nil {
		out.Claim = untool(out.Claim)
	}
	return out, nil
}

// checkHolderTool refuses (ErrForbidden) a holder's claim for tool when
// the same holder holds the key for another tool.
func (g genericTools) checkHolderTool(ctx context.Context, project, key, holder, tool string) error {
	if cur, err := g.st.GetClaim(ctx, project, key); err == nil {
		if t, h := splitHolder(cur.Holder); h == holder && t != tool {
			return fmt.Errorf("%w: the claim on key %q in project %s of holder %s was taken for tool %q, not %q",
				cardstore.ErrForbidden, key, project, holder, t, tool)
		}
	}
	return nil
}

// untool returns a copy of a claim with the holders shown without their
// tool prefix.
func untool(c *cardstore.Claim) *cardstore.Claim {
	out := *c
	_, out.Holder = splitHolder(c.Holder)
	_, out.PreviousHolder = splitHolder(c.PreviousHolder)
	return &out
}

// untoolHeld shows the holder of a ClaimHeldError without its tool
// prefix; other errors pass unchanged.
func untoolHeld(err error, project, key string) error {
	var held *cardstore.ClaimHeldError
	if errors.As(err, &held) {
		_, h := splitHolder(held.Holder)
		return fmt.Errorf("%w: key %q in project %s", &cardstore.ClaimHeldError{Holder: h, ExpiresAt: held.ExpiresAt}, key, project)
	}
	return err
}

// ReleaseTool implements ToolStore.
func (g genericTools) ReleaseTool(ctx context.Context, project, key, holder, tool string) error {
	if cur, err := g.st.GetClaim(ctx, project, key); err == nil {
		if t, _ := splitHolder(cur.Holder); t != tool {
			return fmt.Errorf("%w: the claim on key %q in project %s was taken for tool %q, not %q", cardstore.ErrForbidden, key, project, t, tool)
		}
	}
	return g.st.Release(ctx, project, key, toolHolder(tool, holder))
}

// PutToolResult implements ToolStore.
func (g genericTools) PutToolResult(ctx context.Context, tool, holder string, token uint64, cards ...*card.Card) error {
	for _, c := range cards {
		if c == nil || c.Type != card.TypeToolResult {
			continue
		}
		if err := cardstore.CheckResultTool(c, tool); err != nil {
			return err
		}
		turn := c.Metadata.AgentTurnID
		if err := g.checkCallTool(ctx, c.ProjectID, turn, c.ToolCallID, tool); err != nil {
			return err
		}
		if _, err := g.st.FindToolResult(ctx, c.ProjectID, turn, c.ToolCallID); err == nil {
			continue // answered already: Put decides (no-op or ErrResultExists)
		} else if !errors.Is(err, cardstore.ErrNotFound) && !errors.Is(err, cardstore.ErrInvalid) {
			return err
		}
		key := cardstore.CallKey{AgentTurnID: turn, ToolCallID: c.ToolCallID}.String()
		name := fmt.Sprintf("%q in project %s", key, c.ProjectID)
		if holder == "" {
			return fmt.Errorf("%w: no claim given for the call %s: a worker writes a result only under the call's claim, naming its holder and fencing token",
				cardstore.ErrForbidden, name)
		}
		cur, err := g.st.GetClaim(ctx, c.ProjectID, key)
		if errors.Is(err, cardstore.ErrNotFound) {
			return fmt.Errorf("%w: the call %s has no claim: a worker writes a result only under the call's claim (claim it on svc.cardstore.claim.%s first)",
				cardstore.ErrForbidden, name, tool)
		}
		if err != nil {
			return err
		}
		t, h := splitHolder(cur.Holder)
		switch {
		case t != tool:
			return fmt.Errorf("%w: the call %s is claimed for tool %q, not %q", cardstore.ErrForbidden, name, t, tool)
		case h != holder || cur.Token != token:
			return fmt.Errorf("%w: the result was written under the claim of %s with token %d, but the call %s is now held by %s with token %d",
				cardstore.ErrClaimLost, holder, token, name, h, cur.Token)
		}
	}
	return g.st.Put(ctx, cards...)
}
