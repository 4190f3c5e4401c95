package jsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
)

// StartCall begins a call; see cardstore.Store. JetStream has no
// transaction that reads one subject and writes another, so the result
// check and the claim are made atomic by their order: claim first, then
// look for the result.
//
//   - The claim is a compare-and-set on the claim record, like Claim's;
//     it is first written expecting no record at all, without reading
//     (claimFirst: a first delivery's key has none), and read and judged
//     only when the key has one.
//   - Then one read asks for the result record and the call card. Results
//     are never removed, so a result that is absent now was absent when
//     the claim was taken: the claim stands, as if both happened at that
//     moment. A result written later ends the claim like any new result.
//   - A result that is there was written before the read. The claim is
//     then ended again with a tombstone that keeps its fencing token (as
//     a result's Put does), and StartCall returns the result, as if the
//     claim had never been taken.
//
// The other order (look, then claim) is what the worker did before
// StartCall, and it is not atomic: a result written between the two
// leaves a tombstone that the claim takes with Token+1, no take-over,
// and the call runs again. Claiming first costs a call that already has a
// result two small writes (the claim and its tombstone) instead of none;
// such calls are redeliveries, rare next to first deliveries, which this
// order serves with one write and one batched read, and no extra read.
//
// When another holder has the claim (ErrClaimHeld) StartCall still
// returns the call's result if it has one. When the read after the claim
// fails, the claim is released (best effort, as the worker's retry does)
// so that a redelivery neither waits for the lease nor counts as a
// take-over. A tombstone that cannot be written leaves the claim to lapse
// with its lease; the result is returned all the same.
func (s *Store) StartCall(ctx context.Context, req cardstore.StartCallRequest) (*cardstore.StartCallResult, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := cardstore.CheckStartCall(req); err != nil {
		return nil, err
	}
	leave, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	return s.startCall(ctx, req, "")
}

// StartCallTool is StartCall for a worker of tool (a tool token), with
// ClaimTool's rules for the claim: when the call's tool.call card exists
// it must call tool, else cardstore.ErrForbidden; the claim records tool,
// and a holder's claim taken for another tool is not renewed
// (ErrForbidden). A call that has a result returns it whatever those
// checks say (it takes no claim; any worker may read a result), as
// boltstore's StartCallTool does.
func (s *Store) StartCallTool(ctx context.Context, req cardstore.StartCallRequest, tool string) (*cardstore.StartCallResult, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := cardstore.CheckStartCall(req); err != nil {
		return nil, err
	}
	leave, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	return s.startCall(ctx, req, tool)
}

// startCall is StartCall after its checks; a non-empty tool makes it
// StartCallTool.
func (s *Store) startCall(ctx context.Context, req cardstore.StartCallRequest, tool string) (*cardstore.StartCallResult, error) {
	creq := cardstore.ClaimRequest{ProjectID: req.ProjectID, Key: cardstore.CallKey{AgentTurnID: req.AgentTurnID, ToolCallID: req.ToolCallID}.String(), Holder: req.Holder, Lease: req.Lease}
	resultSubj := s.lay.result(req.ProjectID, req.AgentTurnID, req.ToolCallID)
	var c *cardstore.Claim
	var err error
	if tool != "" {
		err = s.checkCallTool(ctx, req.ProjectID, req.AgentTurnID, req.ToolCallID, tool)
	}
	if err == nil {
		c, err = s.claimFirst(ctx, creq, tool)
	}
	if errors.Is(err, cardstore.ErrClaimHeld) || errors.Is(err, cardstore.ErrForbidden) {
		m, rerr := s.readLast(ctx, resultSubj, false)
		if rerr != nil || m == nil {
			return nil, err
		}
		return s.resultOf(ctx, req, m)
	}
	if err != nil {
		return nil, err
	}
	subjects := []string{resultSubj}
	if req.ToolCallCardID != "" {
		subjects = append(subjects, s.lay.card(req.ProjectID, req.ToolCallCardID))
	}
	ms, err := s.lastMany(ctx, subjects, true)
	if err != nil {
		_ = s.release(context.WithoutCancel(ctx), req.ProjectID, creq.Key, req.Holder, "", false)
		return nil, err
	}
	if ms[0] != nil {
		out, err := s.resultOf(ctx, req, ms[0])
		if err != nil {
			return nil, err
		}
		_ = s.endClaim(ctx, creq, c.Token)
		return out, nil
	}
	out := &cardstore.StartCallResult{Claim: c}
	if len(ms) > 1 && ms[1] != nil {
		if out.CallCard, err = decodeCard(ms[1]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// resultOf reads the card a result record names.
func (s *Store) resultOf(ctx context.Context, req cardstore.StartCallRequest, m *msg) (*cardstore.StartCallResult, error) {
	res, err := s.getCard(ctx, req.ProjectID, string(m.data))
	if err != nil {
		return nil, fmt.Errorf("jsstore: results index names card %s in project %s: %w", m.data, req.ProjectID, err)
	}
	return &cardstore.StartCallResult{Result: res}, nil
}

// endClaim replaces the claim (req's holder, token) by a tombstone that
// keeps the token, unless it has changed since (a result's Put ended it).
func (s *Store) endClaim(ctx context.Context, req cardstore.ClaimRequest, token uint64) error {
	subject := s.lay.claim(req.ProjectID, req.Key)
	return retryCAS(ctx, func() error {
		m, rec, err := s.loadClaim(ctx, subject, req.ProjectID, req.Key)
		if err != nil || rec == nil || rec.Released || rec.Holder != req.Holder || rec.Token != token {
			return err
		}
		data, err := json.Marshal(tombstone(token))
		if err != nil {
			return fmt.Errorf("jsstore: encode claim tombstone: %w", err)
		}
		_, err = s.publish(ctx, []*nats.Msg{rollup(expect(record(subject, data), m.seq))})
		return err
	})
}
