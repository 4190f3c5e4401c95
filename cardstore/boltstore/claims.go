package boltstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/utpmesh/utpmesh/cardstore"
)

// claimRecord is a claim as stored (JSON): a call's among its turn's
// records, every other claim in the claims bucket (claimSlot).
type claimRecord = cardstore.ClaimRecord

// claimData is the stored claim under k (project 0x00 claim key), or nil.
func (b *buckets) claimData(k []byte) []byte {
	slot, key := claimSlot(b.recs, b.claims, k)
	return slot.Get(key)
}

// putClaim stores the claim under k.
func (b *buckets) putClaim(k, data []byte) error {
	slot, key := claimSlot(b.recs, b.claims, k)
	return slot.Put(key, data)
}

// deleteClaim deletes the claim under k, if any.
func (b *buckets) deleteClaim(k []byte) error {
	slot, key := claimSlot(b.recs, b.claims, k)
	return slot.Delete(key)
}

// releaseCallClaim replaces the claim on the call's cardstore.CallKey,
// if there is one, by a tombstone. applyPut calls it for every new
// tool.result card, so the worker's claim ends in the same transaction as
// its result and no dead claim stays behind. The claim is the one the
// claim table holds when it knows the key (an in-memory claim), else the
// bucket's; the tombstone is recorded in b.calls for the table.
func releaseCallClaim(b *buckets, project, turn, call string) error {
	key := cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String()
	k, at := join(0, project, key), callRecKey(project, turn, call, callClaim)
	rec, ok := b.tableClaim(k)
	if !ok {
		// Where the claim lives is known: no claimSlot parse of k.
		var err error
		if rec, err = decodeClaim(b.recs.Get(at), cardstore.ClaimName(project, key)); err != nil {
			return err
		}
	}
	if !rec.Live() {
		return nil
	}
	tomb := &claimRecord{Token: rec.Token, Released: true}
	if b.calls != nil {
		tomb.Epoch = b.calls.epoch
	}
	data, err := json.Marshal(tomb)
	if err != nil {
		return err
	}
	if err := b.recs.Put(at, data); err != nil {
		return err
	}
	if b.calls != nil {
		b.calls.ended = append(b.calls.ended, endedClaim{key: string(k), rec: tomb})
	}
	return nil
}

// loadClaim reads the claim under key, or returns nil.
func loadClaim(b *buckets, key []byte, req string) (*claimRecord, error) {
	return decodeClaim(b.claimData(key), req)
}

// decodeClaim decodes a stored claim (nil data: none, nil) named req in
// errors.
func decodeClaim(data []byte, req string) (*claimRecord, error) {
	if data == nil {
		return nil, nil
	}
	var rec claimRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("boltstore: stored claim %s is corrupt: %w", req, err)
	}
	return &rec, nil
}

// writeResults writes the cards of a Put (check, when not nil, runs first
// in the same transaction: PutToolResult's fence) holding the claim locks
// of the calls its tool.result cards answer, from before the write until
// its commit has ended: so no claim decision on those calls overlaps the
// result that ends their claims, and a StartCall that finds no result
// has its claim in the table before the result's transaction reads it.
// Once committed, the tombstones it wrote become the table's state.
func (s *Store) writeResults(ctx context.Context, pcs []putCard, size int, check applyFunc, run *hookRun) error {
	var keys []string
	for i := range pcs {
		if pcs[i].resultKey != nil {
			keys = append(keys, string(join(0, pcs[i].ProjectID, pcs[i].Key().String())))
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	held, err := s.lockClaims(ctx, keys)
	if err != nil {
		return err
	}
	defer s.unlockClaims(held)
	// A call started early on its announced card (pending.go) stores that
	// card first when its Put has not yet: a result never precedes its
	// card.
	calls := s.pending.startedCards(keys)
	for i := range calls {
		size += len(calls[i].Data)
	}
	tx, err := s.writeCalls(ctx, size, func(b *buckets) error {
		run.reset()
		if check != nil {
			if err := check(b); err != nil {
				return err
			}
		}
		wrote := false
		for i := range calls {
			if b.cards.Get(calls[i].key) == nil {
				if err := applyPut(b, calls[i:i+1], nil); err != nil {
					if wrote {
						err = dirty(err)
					}
					return err
				}
				wrote = true
			}
		}
		err := applyPut(b, pcs, run)
		if err != nil && wrote {
			err = dirty(err) // the call's card is written: roll it back too
		}
		return err
	})
	if err != nil {
		return err
	}
	s.pending.forget(keys)
	for _, end := range tx.ended {
		for _, e := range held {
			if e.key == end.key {
				s.mem.durable(e, end.rec)
			}
		}
	}
	return nil
}

// Claim acquires, renews or takes over a lease; see cardstore.ClaimRequest.
// Expiry is judged by the store clock when the claim is decided. When
// another live holder has the claim the error wraps a
// *cardstore.ClaimHeldError. A claim on a call key with a lease up to the
// lock-delay is kept in memory and written with the next commit (see the
// package documentation).
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
	if k, ok := cardstore.ParseCallKey(req.Key); ok {
		e, err := s.mem.lock(ctx, string(key))
		if err != nil {
			return nil, err
		}
		defer s.unlockClaim(e)
		rec, err := s.claimState(e, key, cardstore.ClaimName(req.ProjectID, req.Key))
		if err != nil {
			return nil, err
		}
		return s.grantCall(ctx, e, key, k, rec, req, tool)
	}
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

// claimState returns the state of the call key whose entry e the caller
// holds: the table's, or else the bucket's, which it loads into e.
func (s *Store) claimState(e *claimEntry, key []byte, name string) (*claimRecord, error) {
	if rec, ok := s.mem.state(e); ok {
		return rec, nil
	}
	var rec *claimRecord
	err := s.view(func(b *buckets) error {
		var err error
		rec, err = loadClaim(b, key, name)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.mem.load(e, rec)
	return rec, nil
}

// grantCall decides req for tool on the call k, whose key's entry e the
// caller holds and whose state is rec, by cardstore.NextClaim's rules and
// the lock-delay, and records the claim: in memory when its lease is up
// to the lock-delay, else in a transaction of its own.
func (s *Store) grantCall(ctx context.Context, e *claimEntry, key []byte, k cardstore.CallKey, rec *claimRecord, req cardstore.ClaimRequest, tool string) (*cardstore.Claim, error) {
	now := s.cfg.clock().UTC()
	c, err := cardstore.NextClaim(rec, req, tool, now)
	if err != nil {
		return nil, err
	}
	if err := s.checkLockDelay(ctx, req.ProjectID, k, rec, req.Holder, now); err != nil {
		return nil, err
	}
	next := cardstore.RecordOf(c, tool)
	next.Epoch = s.boots.epoch
	if s.inMemory(req.Lease) {
		if err := s.mem.record(e, next); err != nil {
			return nil, err
		}
		return c, nil
	}
	name := cardstore.ClaimName(req.ProjectID, req.Key)
	data, err := json.Marshal(next)
	if err != nil {
		return nil, fmt.Errorf("boltstore: encode claim %s: %w", name, err)
	}
	err = s.write(ctx, 64+len(key)+len(data), func(b *buckets) error {
		if err := b.putClaim(key, data); err != nil {
			return fmt.Errorf("boltstore: write claim %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.mem.durable(e, next)
	return c, nil
}

// applyClaim takes, renews or takes over the claim of req (stored under
// key, not a call key) for tool within a write transaction, by the rules
// of cardstore.ClaimRequest, judging expiry by the store clock now.
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
	next := cardstore.RecordOf(c, tool)
	next.Epoch = s.boots.epoch
	data, err := json.Marshal(next)
	if err != nil {
		return nil, fmt.Errorf("boltstore: encode claim %s: %w", name, err)
	}
	if err := b.putClaim(key, data); err != nil {
		return nil, dirty(fmt.Errorf("boltstore: write claim %s: %w", name, err))
	}
	return c, nil
}

// Release deletes the claim if holder holds it, expired or not; otherwise
// it fails with an error wrapping cardstore.ErrClaimLost. The deletion is
// a durable write, in-memory claims included.
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
	del := func(b *buckets) error {
		if err := b.deleteClaim(k); err != nil {
			return dirty(fmt.Errorf("boltstore: delete claim %s: %w", name, err))
		}
		return nil
	}
	if _, ok := cardstore.ParseCallKey(key); ok {
		e, err := s.mem.lock(ctx, string(k))
		if err != nil {
			return err
		}
		defer s.unlockClaim(e)
		rec, err := s.claimState(e, k, name)
		if err != nil {
			return err
		}
		if err := cardstore.CheckReleasable(rec, projectID, key, holder, tool, checkTool); err != nil {
			return err
		}
		if err := s.write(ctx, 64+len(k), del); err != nil {
			return err
		}
		s.mem.durable(e, nil)
		return nil
	}
	return s.write(ctx, 64+len(k), func(b *buckets) error {
		rec, err := loadClaim(b, k, name)
		if err != nil {
			return err
		}
		if err := cardstore.CheckReleasable(rec, projectID, key, holder, tool, checkTool); err != nil {
			return err
		}
		return del(b)
	})
}

// GetClaim returns the claim on key without changing it, with Expired
// judged by the store clock at the time of the read; no claim is an error
// wrapping cardstore.ErrNotFound. It is a read: it never waits for the
// committer or a key's lock, and it sees an in-memory claim at once.
func (s *Store) GetClaim(ctx context.Context, projectID, key string) (*cardstore.Claim, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := cardstore.CheckClaimKey(projectID, key); err != nil {
		return nil, err
	}
	k := join(0, projectID, key)
	if s.closing.Load() {
		return nil, cardstore.ErrClosed
	}
	if rec, ok := s.mem.peek(string(k)); ok {
		return cardstore.ClaimOf(rec, projectID, key, s.cfg.clock().UTC())
	}
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

// liveCallClaim returns the key and holder of a live in-memory claim
// whose claim's project 0x00 key starts with prefix (DeleteTurn's check of a
// turn's calls), or ok false.
func (t *claimTable) liveCallClaim(prefix string) (key, holder string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, e := range t.entries {
		if e.loaded && e.rec.Live() && strings.HasPrefix(k, prefix) {
			return k, e.rec.Holder, true
		}
	}
	return "", "", false
}
