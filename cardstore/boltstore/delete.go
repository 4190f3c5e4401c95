package boltstore

import (
	"bytes"
	"context"
	"fmt"

	"github.com/utpmesh/utpmesh/cardstore"
)

// DeleteTurn removes the turn's cards and every index entry that names
// them (turns, results, turninfo, turnlist, agentturns), its calls'
// outbox entries and the tombstones of its calls' claims, in one write;
// see cardstore.Store. It checks every claim of the turn (in the claims
// bucket and in memory) before it deletes anything, so a live claim
// (ErrClaimHeld) leaves the turn whole.
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
		var tombstones [][]byte
		cc := b.claims.Cursor()
		for k, _ := cc.Seek(claimPrefix); k != nil && bytes.HasPrefix(k, claimPrefix); k, _ = cc.Next() {
			rec, err := loadClaim(b, k, cardstore.ClaimName(projectID, string(k[len(projectID)+1:])))
			if err != nil {
				return err
			}
			if rec.Live() {
				return fmt.Errorf("%w: turn %q of project %s has a call with a live claim (%s, held by %s): it is running or was abandoned without a result, so the turn is kept",
					cardstore.ErrClaimHeld, agentTurnID, projectID, k[len(projectID)+1:], rec.Holder)
			}
			tombstones = append(tombstones, bytes.Clone(k))
		}
		if k, holder, ok := s.mem.liveCallClaim(string(claimPrefix)); ok { // in memory, not written yet
			return fmt.Errorf("%w: turn %q of project %s has a call with a live claim (%s, held by %s): it is running or was abandoned without a result, so the turn is kept",
				cardstore.ErrClaimHeld, agentTurnID, projectID, k[len(projectID)+1:], holder)
		}
		prefix := turnPrefix(projectID, agentTurnID)
		var turnKeys, cardIDs [][]byte
		tc := b.turns.Cursor()
		for k, v := tc.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = tc.Next() {
			turnKeys = append(turnKeys, bytes.Clone(k))
			cardIDs = append(cardIDs, bytes.Clone(v))
		}
		resultPrefix := append(join(1, projectID, agentTurnID), sep)
		var resultKeys [][]byte
		rc := b.results.Cursor()
		for k, _ := rc.Seek(resultPrefix); k != nil && bytes.HasPrefix(k, resultPrefix); k, _ = rc.Next() {
			resultKeys = append(resultKeys, bytes.Clone(k))
		}
		var outboxKeys [][]byte
		oc := b.outbox.Cursor()
		for k, _ := oc.Seek(resultPrefix); k != nil && bytes.HasPrefix(k, resultPrefix); k, _ = oc.Next() {
			outboxKeys = append(outboxKeys, bytes.Clone(k))
		}
		infoKey := turnInfoKey(projectID, agentTurnID)
		rec, err := loadTurnRecord(b, infoKey)
		if err != nil {
			return err
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
		if err := del("turn index", b.turns, turnKeys...); err != nil {
			return err
		}
		if err := del("result index", b.results, resultKeys...); err != nil {
			return err
		}
		if err := del("claim tombstone", b.claims, tombstones...); err != nil {
			return err
		}
		if err := del("outbox entry", b.outbox, outboxKeys...); err != nil {
			return err
		}
		if rec != nil {
			if err := del("turn summary", b.turnInfo, infoKey); err != nil {
				return err
			}
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
