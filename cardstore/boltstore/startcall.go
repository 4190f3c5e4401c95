package boltstore

import (
	"context"

	"github.com/utpmesh/utpmesh/cardstore"
)

// StartCall begins a call in one request; see cardstore.Store. A read
// transaction looks for the call's result and reads the card named
// ToolCallCardID, so a call that already has a result costs no write.
// When that card is missing and a Put of it is announced (AnnouncePut),
// StartCall waits for the Put to end (ctx bounds the wait) and reads the
// card again before it checks the tool and claims.
// Otherwise, holding the call's claim lock (which every result Put holds
// until its commit has ended), a second read looks for the result again
// and, finding none, the claim is taken as Claim takes it: in memory for
// a lease up to the lock-delay (written with the next commit, with no
// commit of its own), else in a transaction of its own. So the check and
// the claim are atomic. The claim is the core's (no tool), as Claim's.
func (s *Store) StartCall(ctx context.Context, req cardstore.StartCallRequest) (*cardstore.StartCallResult, error) {
	return s.startCall(ctx, req, "", false)
}

// StartCallEarly is StartCall for a worker that dies with this store (the
// node's in-process worker): when the call's card is missing and its Put
// is announced, it starts the call on the announced card at once instead
// of waiting for the card's commit. The call's result then commits with
// or after the card. A worker in another process must not use it: a crash
// of the store before the card's commit would lose the card and the
// claim while that worker runs on, and the lock-delay, which knows calls
// by their stored cards, would not hold a second worker back.
func (s *Store) StartCallEarly(ctx context.Context, req cardstore.StartCallRequest) (*cardstore.StartCallResult, error) {
	return s.startCall(ctx, req, "", true)
}

// StartCallTool is StartCall for a worker of tool (a tool token), with
// ClaimTool's rules for the claim: when the call's tool.call card exists
// it must call tool, else cardstore.ErrForbidden; the claim records tool.
// A call that has a result returns it without those checks (it takes no
// claim; any worker may read a result).
func (s *Store) StartCallTool(ctx context.Context, req cardstore.StartCallRequest, tool string) (*cardstore.StartCallResult, error) {
	return s.startCall(ctx, req, tool, false)
}

// startCall is StartCall; a non-empty tool makes it StartCallTool, early
// StartCallEarly.
func (s *Store) startCall(ctx context.Context, req cardstore.StartCallRequest, tool string, early bool) (*cardstore.StartCallResult, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := cardstore.CheckStartCall(req); err != nil {
		return nil, err
	}
	out := &cardstore.StartCallResult{}
	err := s.view(func(b *buckets) error {
		var err error
		if out.Result, err = findResult(b, req.ProjectID, req.AgentTurnID, req.ToolCallID); err != nil || out.Result != nil {
			return err
		}
		if req.ToolCallCardID == "" {
			return nil
		}
		if data := b.cards.Get(cardKey(req.ProjectID, req.ToolCallCardID)); data != nil {
			out.CallCard, err = decodeCard(data)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if out.Result != nil {
		return out, nil
	}
	var ann *pendingPut
	if out.CallCard == nil && req.ToolCallCardID != "" {
		// The admission may be committing the card while its command is
		// delivered (AnnouncePut): wait for that Put, or start on it.
		if out.CallCard, ann, err = s.callCard(ctx, req.ProjectID, req.ToolCallCardID, req.AgentTurnID, req.ToolCallID, early); err != nil {
			return nil, err
		}
	}
	if tool != "" {
		if err := s.checkCallTool(ctx, req.ProjectID, req.AgentTurnID, req.ToolCallID, tool); err != nil {
			return nil, err
		}
	}
	creq := cardstore.ClaimRequest{ProjectID: req.ProjectID, Key: cardstore.CallKey{AgentTurnID: req.AgentTurnID, ToolCallID: req.ToolCallID}.String(), Holder: req.Holder, Lease: req.Lease}
	key := join(0, req.ProjectID, creq.Key)
	e, err := s.mem.lock(ctx, string(key))
	if err != nil {
		return nil, err
	}
	defer s.unlockClaim(e)
	// Under the call's lock no result can commit (every result Put holds
	// it until its commit has ended): look again, and decide.
	rk := resultKey(req.ProjectID, req.AgentTurnID, req.ToolCallID)
	rec, loaded := s.mem.state(e)
	answered := false
	err = s.view(func(b *buckets) error {
		if b.recs.Get(rk) != nil {
			answered = true // written since the first read: no claim
			return nil
		}
		if loaded {
			return nil
		}
		var err error
		rec, err = loadClaim(b, key, cardstore.ClaimName(req.ProjectID, creq.Key))
		return err
	})
	if err != nil {
		return nil, err
	}
	if answered {
		res, err := s.FindToolResult(ctx, req.ProjectID, req.AgentTurnID, req.ToolCallID)
		if err != nil {
			return nil, err
		}
		return &cardstore.StartCallResult{Result: res}, nil
	}
	if !loaded {
		s.mem.load(e, rec)
	}
	k := cardstore.CallKey{AgentTurnID: req.AgentTurnID, ToolCallID: req.ToolCallID}
	if out.Claim, err = s.grantCall(ctx, e, key, k, rec, creq, tool); err != nil {
		return nil, err
	}
	if ann != nil {
		// Started before its card is stored: the result stores it if the
		// announced Put has not (pending.go).
		s.pending.record(string(key), ann)
	}
	return out, nil
}
