package boltstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/utpmesh/utpmesh/cardstore"
)

// claimRecord is a claim as stored in the claims bucket (JSON).
type claimRecord = cardstore.ClaimRecord

// releaseCallClaim replaces the claim on the call's cardstore.CallKey,
// if there is one, by a tombstone. applyPut calls it for every new
// tool.result card, so the worker's claim ends in the same transaction as
// its result and no dead claim stays behind.
func releaseCallClaim(b *buckets, project, turn, call string) error {
	key := cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String()
	k := join(0, project, key)
	rec, err := loadClaim(b, k, cardstore.ClaimName(project, key))
	if err != nil || rec == nil || rec.Released {
		return err
	}
	data, err := json.Marshal(&claimRecord{Token: rec.Token, Released: true})
	if err != nil {
		return err
	}
	return b.claims.Put(k, data)
}

// loadClaim reads the claim under key, or returns nil.
func loadClaim(b *buckets, key []byte, req string) (*claimRecord, error) {
	data := b.claims.Get(key)
	if data == nil {
		return nil, nil
	}
	var rec claimRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("boltstore: stored claim %s is corrupt: %w", req, err)
	}
	return &rec, nil
}

// Claim acquires, renews or takes over a lease; see cardstore.ClaimRequest.
// Expiry is judged by the store clock when the request's transaction runs.
// When another live holder has the claim the error wraps a
// *cardstore.ClaimHeldError.
func (s *Store) Claim(ctx context.Context, req cardstore.ClaimRequest) (*cardstore.Claim, error) {
	return s.claim(ctx, req, "")
}

// claim is Claim recording tool (a tool token, "" for the core) in the
// claim. A holder may not renew its claim for another tool.
func (s *Store) claim(ctx context.Context, req cardstore.ClaimRequest, tool string) (*cardstore.Claim, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := cardstore.CheckClaim(req); err != nil {
		return nil, err
	}
	key := join(0, req.ProjectID, req.Key)
	var out *cardstore.Claim
	err := s.write(ctx, 64+len(key)+len(req.Holder), func(b *buckets) error {
		var err error
		out, err = s.applyClaim(b, key, req, tool)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// applyClaim takes, renews or takes over the claim of req (stored under
// key) for tool within a write transaction, by the rules of
// cardstore.ClaimRequest, judging expiry by the store clock now.
func (s *Store) applyClaim(b *buckets, key []byte, req cardstore.ClaimRequest, tool string) (*cardstore.Claim, error) {
	name := cardstore.ClaimName(req.ProjectID, req.Key)
	rec, err := loadClaim(b, key, name)
	if err != nil {
		return nil, err
	}
	c, err := cardstore.NextClaim(rec, req, tool, s.cfg.clock().UTC())
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(cardstore.RecordOf(c, tool))
	if err != nil {
		return nil, fmt.Errorf("boltstore: encode claim %s: %w", name, err)
	}
	if err := b.claims.Put(key, data); err != nil {
		return nil, dirty(fmt.Errorf("boltstore: write claim %s: %w", name, err))
	}
	return c, nil
}

// Release deletes the claim if holder holds it, expired or not; otherwise
// it fails with an error wrapping cardstore.ErrClaimLost.
func (s *Store) Release(ctx context.Context, projectID, key, holder string) error {
	return s.release(ctx, projectID, key, holder, "", false)
}

// release is Release; with checkTool it refuses (ErrForbidden) a claim
// taken for another tool than tool.
func (s *Store) release(ctx context.Context, projectID, key, holder, tool string, checkTool bool) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	if err := cardstore.CheckRelease(projectID, key, holder); err != nil {
		return err
	}
	k := join(0, projectID, key)
	name := cardstore.ClaimName(projectID, key)
	return s.write(ctx, 64+len(k), func(b *buckets) error {
		rec, err := loadClaim(b, k, name)
		if err != nil {
			return err
		}
		if err := cardstore.CheckReleasable(rec, projectID, key, holder, tool, checkTool); err != nil {
			return err
		}
		if err := b.claims.Delete(k); err != nil {
			return dirty(fmt.Errorf("boltstore: delete claim %s: %w", name, err))
		}
		return nil
	})
}

// GetClaim returns the claim on key without changing it, with Expired
// judged by the store clock at the time of the read; no claim is an error
// wrapping cardstore.ErrNotFound. It is a read: it never waits for the
// committer.
func (s *Store) GetClaim(ctx context.Context, projectID, key string) (*cardstore.Claim, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := cardstore.CheckClaimKey(projectID, key); err != nil {
		return nil, err
	}
	k := join(0, projectID, key)
	name := cardstore.ClaimName(projectID, key)
	var rec *claimRecord
	err := s.view(func(b *buckets) error {
		var err error
		rec, err = loadClaim(b, k, name)
		return err
	})
	if err != nil {
		return nil, err
	}
	return cardstore.ClaimOf(rec, projectID, key, s.cfg.clock().UTC())
}
