package boltstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
)

// claimRecord is a claim as stored in the claims bucket. A released
// record (a tombstone) is no claim; it keeps the last fencing token so
// that the next claim of the key gets a larger one.
type claimRecord struct {
	Holder    string    `json:"holder,omitempty"`
	Token     uint64    `json:"token"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	Released  bool      `json:"released,omitempty"`
	// Tool is the tool token (subjects.ToolToken) of a claim taken with
	// ClaimTool; "" for a claim taken with Claim (the mesh core).
	Tool string `json:"tool,omitempty"`
}

// releaseCallClaim replaces the claim on the call's cardstore.CallKey,
// if there is one, by a tombstone. applyPut calls it for every new
// tool.result card, so the worker's claim ends in the same transaction as
// its result and no dead claim stays behind.
func releaseCallClaim(b *buckets, project, turn, call string) error {
	k := join(0, project, cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String())
	rec, err := loadClaim(b, k, fmt.Sprintf("on key %q in project %s", cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String(), project))
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
	if err := checkProject(req.ProjectID); err != nil {
		return nil, err
	}
	if err := checkClaimString("key", req.Key); err != nil {
		return nil, err
	}
	if err := checkClaimString("holder", req.Holder); err != nil {
		return nil, err
	}
	if err := cardstore.CheckLease(req.Lease); err != nil {
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
	name := fmt.Sprintf("on key %q in project %s", req.Key, req.ProjectID)
	rec, err := loadClaim(b, key, name)
	if err != nil {
		return nil, err
	}
	now := s.cfg.clock().UTC()
	c := &cardstore.Claim{ProjectID: req.ProjectID, Key: req.Key, Holder: req.Holder, ExpiresAt: now.Add(req.Lease)}
	switch {
	case rec == nil:
		c.Token = 1
	case rec.Released:
		c.Token = rec.Token + 1 // fencing tokens never go back
	case rec.Holder == req.Holder && rec.Tool != tool:
		return nil, fmt.Errorf("%w: the claim %s of holder %s was taken for tool %q, not %q", cardstore.ErrForbidden, name, req.Holder, rec.Tool, tool)
	case rec.Holder == req.Holder:
		c.Token = rec.Token // renewal (even of a lapsed lease nobody took)
	case now.Before(rec.ExpiresAt):
		return nil, fmt.Errorf("%w: key %q in project %s", &cardstore.ClaimHeldError{Holder: rec.Holder, ExpiresAt: rec.ExpiresAt}, req.Key, req.ProjectID)
	default:
		c.Token, c.TakenOver, c.PreviousHolder = rec.Token+1, true, rec.Holder
	}
	data, err := json.Marshal(&claimRecord{Holder: c.Holder, Token: c.Token, ExpiresAt: c.ExpiresAt, Tool: tool})
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
	if err := checkProject(projectID); err != nil {
		return err
	}
	if err := checkClaimString("key", key); err != nil {
		return err
	}
	if err := checkClaimString("holder", holder); err != nil {
		return err
	}
	k := join(0, projectID, key)
	name := fmt.Sprintf("on key %q in project %s", key, projectID)
	return s.write(ctx, 64+len(k), func(b *buckets) error {
		rec, err := loadClaim(b, k, name)
		if err != nil {
			return err
		}
		if rec == nil || rec.Released {
			return fmt.Errorf("%w: %s has no claim %s", cardstore.ErrClaimLost, holder, name)
		}
		if checkTool && rec.Tool != tool {
			return fmt.Errorf("%w: the claim %s was taken for tool %q, not %q", cardstore.ErrForbidden, name, rec.Tool, tool)
		}
		if rec.Holder != holder {
			return fmt.Errorf("%w: the claim %s belongs to %s, not %s", cardstore.ErrClaimLost, name, rec.Holder, holder)
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
	if err := checkProject(projectID); err != nil {
		return nil, err
	}
	if err := checkClaimString("key", key); err != nil {
		return nil, err
	}
	k := join(0, projectID, key)
	name := fmt.Sprintf("on key %q in project %s", key, projectID)
	var rec *claimRecord
	err := s.view(func(b *buckets) error {
		var err error
		rec, err = loadClaim(b, k, name)
		return err
	})
	if err != nil {
		return nil, err
	}
	if rec == nil || rec.Released {
		return nil, fmt.Errorf("%w: no claim %s", cardstore.ErrNotFound, name)
	}
	now := s.cfg.clock().UTC()
	return &cardstore.Claim{
		ProjectID: projectID, Key: key, Holder: rec.Holder, Token: rec.Token,
		ExpiresAt: rec.ExpiresAt, Expired: !now.Before(rec.ExpiresAt),
	}, nil
}
