package jsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
)

// claimRecord is a claim as stored on its subject (latest version only):
// cardstore's record and its format. A tombstone written with a call's
// result keeps the last fencing token, so that the key's next claim gets
// a larger one; Release writes one with token 0, so that the next claim
// starts at 1 again.
type claimRecord struct {
	cardstore.ClaimRecord
	// Format is claimFormat in every record this version writes. A record
	// without it was written before the store kept Tool: see legacyHolder.
	Format int `json:"format,omitempty"`
}

// base is the record cardstore's rules judge (nil for nil).
func (r *claimRecord) base() *cardstore.ClaimRecord {
	if r == nil {
		return nil
	}
	return &r.ClaimRecord
}

// claimFormat marks the claim records that keep the tool in Tool.
const claimFormat = 2

// legacyPrefix starts the holder of a tool's claim written before
// claimFormat: natsstore then served a tool's claims on top of Claim and
// kept the tool in the holder, "tool:<tool>/<holder>".
const legacyPrefix = "tool:"

// legacyHolder returns the tool and holder of a holder written in the
// previous format, and false for any other. A stream written by an older
// mesh keeps such claims; they are read as the claims of that tool and
// holder, so a worker holding one when its mesh is upgraded may renew,
// release and answer under it as before.
func legacyHolder(stored string) (tool, holder string, ok bool) {
	rest, ok := strings.CutPrefix(stored, legacyPrefix)
	if !ok {
		return "", "", false
	}
	i := strings.IndexByte(rest, '/')
	if i <= 0 || i == len(rest)-1 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}

// newClaimRecord is the record of a live claim, in the current format.
func newClaimRecord(c *cardstore.Claim, tool string) *claimRecord {
	return &claimRecord{ClaimRecord: *cardstore.RecordOf(c, tool), Format: claimFormat}
}

// tombstone is the record that ends a claim, keeping token.
func tombstone(token uint64) *claimRecord {
	return &claimRecord{ClaimRecord: cardstore.ClaimRecord{Token: token, Released: true}, Format: claimFormat}
}

// loadClaim reads the claim record on subject: the message (for the
// compare-and-set) and the record, both nil when the key was never
// claimed. A record of the previous format comes back with its tool and
// holder split (legacyHolder).
func (s *Store) loadClaim(ctx context.Context, subject, project, key string) (*msg, *claimRecord, error) {
	return s.loadClaimFrom(ctx, nil, subject, project, key)
}

// loadClaimFrom is loadClaim that takes the record from pre when pre has
// read it.
func (s *Store) loadClaimFrom(ctx context.Context, pre prefetch, subject, project, key string) (*msg, *claimRecord, error) {
	m, err := s.lastOf(ctx, pre, subject)
	if err != nil || m == nil {
		return nil, nil, err
	}
	var rec claimRecord
	if err := json.Unmarshal(m.data, &rec); err != nil {
		return nil, nil, fmt.Errorf("jsstore: stored claim %s (key %q in project %s) is corrupt: %w", subject, key, project, err)
	}
	if rec.Format == 0 && rec.Tool == "" {
		if tool, holder, ok := legacyHolder(rec.Holder); ok {
			rec.Tool, rec.Holder = tool, holder
		}
	}
	return m, &rec, nil
}

// Claim acquires, renews or takes over a lease; see cardstore.ClaimRequest.
// Expiry is judged by the store clock (Config.Clock) when the claim record
// has been read; the write is a compare-and-set on that record, so a
// concurrent change makes Claim read and judge again. When another live
// holder has the claim the error wraps a *cardstore.ClaimHeldError.
func (s *Store) Claim(ctx context.Context, req cardstore.ClaimRequest) (*cardstore.Claim, error) {
	return s.checkedClaim(ctx, req, "", nil)
}

// checkedClaim checks req, runs check (when not nil) and claims for tool
// ("" for the core).
func (s *Store) checkedClaim(ctx context.Context, req cardstore.ClaimRequest, tool string, check func() error) (*cardstore.Claim, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := cardstore.CheckClaim(req); err != nil {
		return nil, err
	}
	leave, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	if check != nil {
		if err := check(); err != nil {
			return nil, err
		}
	}
	return s.claim(ctx, req, tool)
}

// claim is Claim after its checks, recording tool (a tool token, "" for
// the core) in the claim. A holder may not renew its claim for another
// tool (boltstore's rule).
func (s *Store) claim(ctx context.Context, req cardstore.ClaimRequest, tool string) (*cardstore.Claim, error) {
	subject := s.lay.claim(req.ProjectID, req.Key)
	var out *cardstore.Claim
	err := retryCAS(ctx, func() error {
		m, rec, err := s.loadClaim(ctx, subject, req.ProjectID, req.Key)
		if err != nil {
			return err
		}
		c, err := cardstore.NextClaim(rec.base(), req, tool, s.cfg.Clock().UTC())
		if err != nil {
			return err
		}
		var seq uint64
		if m != nil {
			seq = m.seq
		}
		data, err := json.Marshal(newClaimRecord(c, tool))
		if err != nil {
			return fmt.Errorf("jsstore: encode claim: %w", err)
		}
		if _, err := s.publish(ctx, []*nats.Msg{rollup(expect(record(subject, data), seq))}); err != nil {
			return err
		}
		out = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// claimFirst is claim for a key that most likely has no claim record
// yet (a call's first delivery, StartCall): it first writes the claim
// without reading, expecting the key to have no record, which is the
// write claim makes after reading none, with the same outcome. A key
// that has a record fails the expectation and stores nothing; claim then
// reads it and judges as usual. It spares a first delivery the read from
// the stream leader.
func (s *Store) claimFirst(ctx context.Context, req cardstore.ClaimRequest, tool string) (*cardstore.Claim, error) {
	c, err := cardstore.NextClaim(nil, req, tool, s.cfg.Clock().UTC())
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(newClaimRecord(c, tool))
	if err != nil {
		return nil, fmt.Errorf("jsstore: encode claim: %w", err)
	}
	subject := s.lay.claim(req.ProjectID, req.Key)
	_, err = s.publish(ctx, []*nats.Msg{rollup(expect(record(subject, data), 0))})
	if errors.Is(err, errCAS) {
		return s.claim(ctx, req, tool)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Release ends the claim if holder holds it, expired or not; otherwise it
// fails with an error wrapping cardstore.ErrClaimLost.
func (s *Store) Release(ctx context.Context, projectID, key, holder string) error {
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
	return s.release(ctx, projectID, key, holder, "", false)
}

// release is Release after its checks; with checkTool it refuses
// (ErrForbidden) a claim taken for another tool than tool.
func (s *Store) release(ctx context.Context, projectID, key, holder, tool string, checkTool bool) error {
	subject := s.lay.claim(projectID, key)
	return retryCAS(ctx, func() error {
		m, rec, err := s.loadClaim(ctx, subject, projectID, key)
		if err != nil {
			return err
		}
		if err := cardstore.CheckReleasable(rec.base(), projectID, key, holder, tool, checkTool); err != nil {
			return err
		}
		data, err := json.Marshal(tombstone(0))
		if err != nil {
			return fmt.Errorf("jsstore: encode claim release: %w", err)
		}
		_, err = s.publish(ctx, []*nats.Msg{rollup(expect(record(subject, data), m.seq))})
		return err
	})
}

// GetClaim returns the claim on key without changing it, with Expired
// judged by the store clock at the time of the read; no claim is an error
// wrapping cardstore.ErrNotFound.
func (s *Store) GetClaim(ctx context.Context, projectID, key string) (*cardstore.Claim, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := cardstore.CheckClaimKey(projectID, key); err != nil {
		return nil, err
	}
	leave, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	_, rec, err := s.loadClaim(ctx, s.lay.claim(projectID, key), projectID, key)
	if err != nil {
		return nil, err
	}
	return cardstore.ClaimOf(rec.base(), projectID, key, s.cfg.Clock().UTC())
}
