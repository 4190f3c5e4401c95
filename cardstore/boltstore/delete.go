package boltstore

import (
	"bytes"
	"context"
	"fmt"

	"github.com/utpmesh/utpmesh/cardstore"
)

// DeleteTurn removes the turn's cards and every record that names them
// (the turn's records in turnrecs: index, summary, results, the claims
// of its calls; its turnlist and agentturns entries) and its calls'
// outbox entries, in one write; see cardstore.Store. It checks every
// claim of the turn (stored and in memory) before it deletes anything, so
// a live claim (ErrClaimHeld) leaves the turn whole.
func (s *Store) DeleteTurn(ctx context.Context, projectID, agentTurnID string) (int, error) {
	if err := checkCtx(ctx); err != nil {
		return 0, err
	}
	if err := cardstore.CheckTurn(projectID, agentTurnID); err != nil {
		return 0, err
	}
	n := 0
	err := s.write(ctx, 256, func(b *buckets) error {
		n = 0
		// Check phase: the claims of the turn's calls, and what to delete.
		claimPrefix := join(0, projectID, cardstore.CallKey{AgentTurnID: agentTurnID}.String())
		if k, holder, ok := s.mem.liveCallClaim(string(claimPrefix)); ok { // in memory, not written yet
			return liveClaimError(projectID, agentTurnID, k[len(projectID)+1:], holder)
		}
		base := turnBase(projectID, agentTurnID, 0)
		var recKeys, cardIDs [][]byte
		var info []byte
		rc := b.recs.Cursor()
		for k, v := rc.Seek(base); k != nil && bytes.HasPrefix(k, base); k, v = rc.Next() {
			r, ok := splitTurnRec(k)
			if !ok {
				return fmt.Errorf("boltstore: delete turn %q of project %s: malformed turnrecs key %q", agentTurnID, projectID, k)
			}
			switch {
			case r.kind == kindSeq:
				cardIDs = append(cardIDs, bytes.Clone(v))
			case r.kind == kindInfo:
				info = bytes.Clone(k)
			case r.kind == kindCall && r.rest[len(r.rest)-1] == callClaim:
				call := string(r.rest[:len(r.rest)-2])
				key := cardstore.CallKey{AgentTurnID: agentTurnID, ToolCallID: call}.String()
				rec, err := decodeClaim(v, cardstore.ClaimName(projectID, key))
				if err != nil {
					return err
				}
				if rec.Live() {
					return liveClaimError(projectID, agentTurnID, key, rec.Holder)
				}
			}
			recKeys = append(recKeys, bytes.Clone(k))
		}
		callPrefix := append(join(1, projectID, agentTurnID), sep)
		var outboxKeys [][]byte
		oc := b.outbox.Cursor()
		for k, _ := oc.Seek(callPrefix); k != nil && bytes.HasPrefix(k, callPrefix); k, _ = oc.Next() {
			outboxKeys = append(outboxKeys, bytes.Clone(k))
		}
		var rec *turnRecord
		if info != nil {
			var err error
			if rec, err = loadTurnRecord(b, info); err != nil {
				return err
			}
		}
		// Write phase: every error from here on is after writing began.
		del := func(what string, bk interface{ Delete([]byte) error }, keys ...[]byte) error {
			for _, k := range keys {
				if err := bk.Delete(k); err != nil {
					return dirty(fmt.Errorf("boltstore: delete turn %q of project %s: %s: %w", agentTurnID, projectID, what, err))
				}
			}
			return nil
		}
		for _, id := range cardIDs {
			if err := del("card", b.cards, cardKey(projectID, string(id))); err != nil {
				return err
			}
		}
		if err := del("turn record", b.recs, recKeys...); err != nil {
			return err
		}
		if err := del("outbox entry", b.outbox, outboxKeys...); err != nil {
			return err
		}
		if rec != nil {
			if err := del("turn list", b.turnList, turnKey(turnListPrefix(projectID), rec.FirstSeq)); err != nil {
				return err
			}
			if rec.AgentID != "" {
				if err := del("agent's turn list", b.agentTurns, turnKey(agentTurnsPrefix(projectID, rec.AgentID), rec.FirstSeq)); err != nil {
					return err
				}
			}
		}
		n = len(cardIDs)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// liveClaimError is DeleteTurn's refusal of a turn with a call under a
// live claim on key.
func liveClaimError(projectID, agentTurnID, key, holder string) error {
	return fmt.Errorf("%w: turn %q of project %s has a call with a live claim (%s, held by %s): it is running or was abandoned without a result, so the turn is kept",
		cardstore.ErrClaimHeld, agentTurnID, projectID, key, holder)
}
