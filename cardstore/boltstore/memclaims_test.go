package boltstore_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/subjects"
)

// workerLease is pkg/worker's default claim lease, which the default
// lock-delay equals.
const workerLease = 5 * time.Second

// storedClaim reads the claims bucket's record of key in project p, or
// nil.
func storedClaim(t *testing.T, s *boltstore.Store, p, key string) *cardstore.ClaimRecord {
	t.Helper()
	var rec *cardstore.ClaimRecord
	err := s.DB().View(func(tx *bolt.Tx) error {
		data := claimRecordOf(tx, p, key)
		if data == nil {
			return nil
		}
		rec = &cardstore.ClaimRecord{}
		return json.Unmarshal(data, rec)
	})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// txCount returns the number of commits obs saw.
func (c *commits) txCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.txs
}

// crash copies the store's file as its last commit left it, as a crash of
// the store's process would (claims only in memory are not in it, and no
// clean close is recorded), and returns the copy's path.
func crash(t *testing.T, s *boltstore.Store) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "crashed.db")
	if err := s.DB().View(func(tx *bolt.Tx) error { return tx.CopyFile(path, 0o600) }); err != nil {
		t.Fatal(err)
	}
	return path
}

// reopen opens the store at path; cleanup closes it and checks the file.
func reopen(t *testing.T, path string, opts ...boltstore.Option) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(path, opts...)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		checkFile(t, path)
	})
	return s
}

func callKey(turn, call string) string {
	return cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String()
}

func startReq(c *card.Card, holder string, lease time.Duration) cardstore.StartCallRequest {
	return cardstore.StartCallRequest{ProjectID: c.ProjectID, AgentTurnID: c.Metadata.AgentTurnID, ToolCallID: c.ToolCallID,
		ToolCallCardID: c.CardID, Holder: holder, Lease: lease}
}

// TestCallClaimInMemory: a worker's claim (StartCall, a renewal) is seen
// at once by GetClaim, Claim and StartCall, costs no commit and is not in
// the claims bucket; the call's result ends it in the result's own commit,
// with nothing else committed. A long lease and a claim on another key are
// written at once, as before.
func TestCallClaimInMemory(t *testing.T) {
	obs := &commits{}
	s, _ := openStore(t, boltstore.WithCommitObserver(obs))
	ctx := t.Context()
	call := storetest.ToolCallCard("p", "turn", "c1")
	if err := s.Put(ctx, call); err != nil {
		t.Fatal(err)
	}
	key := callKey("turn", "c1")
	before := obs.txCount()
	res, err := s.StartCall(ctx, startReq(call, "w1", workerLease))
	if err != nil || res.Claim == nil || res.Claim.Token != 1 || res.CallCard == nil {
		t.Fatalf("start call = %+v, %v; want a claim and the call card", res, err)
	}
	if g, err := s.GetClaim(ctx, "p", key); err != nil || g.Holder != "w1" || g.Token != 1 {
		t.Fatalf("get claim = %+v, %v; want w1's claim", g, err)
	}
	var held *cardstore.ClaimHeldError
	if _, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: key, Holder: "w2", Lease: workerLease}); !errors.As(err, &held) || held.Holder != "w1" {
		t.Fatalf("claim by another holder = %v, want held by w1", err)
	}
	if _, err := s.StartCall(ctx, startReq(call, "w2", workerLease)); !errors.As(err, &held) || held.Holder != "w1" {
		t.Fatalf("start call by another holder = %v, want held by w1", err)
	}
	if c, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: key, Holder: "w1", Lease: workerLease}); err != nil || c.Token != 1 {
		t.Fatalf("renewal = %+v, %v", c, err)
	}
	if n := obs.txCount() - before; n != 0 {
		t.Fatalf("claiming and renewing in memory made %d commits, want none", n)
	}
	if rec := storedClaim(t, s, "p", key); rec != nil {
		t.Fatalf("the claims bucket holds %+v before any commit, want nothing", rec)
	}

	result := storetest.ToolResultCard("p", "turn", "c1", card.StatusSuccess)
	if err := s.Put(ctx, result); err != nil {
		t.Fatal(err)
	}
	if n := obs.txCount() - before; n != 1 {
		t.Fatalf("the call (claim, renewal, result) made %d commits, want 1", n)
	}
	rec := storedClaim(t, s, "p", key)
	if rec == nil || !rec.Released || rec.Token != 1 || rec.Epoch != s.BootEpoch() {
		t.Fatalf("claims bucket after the result = %+v, want a tombstone of token 1, epoch %d", rec, s.BootEpoch())
	}
	if _, err := s.GetClaim(ctx, "p", key); !errors.Is(err, cardstore.ErrNotFound) {
		t.Fatalf("get claim after the result = %v, want ErrNotFound", err)
	}
	if got, err := s.StartCall(ctx, startReq(call, "w2", workerLease)); err != nil || got.Result == nil || got.Result.CardID != result.CardID {
		t.Fatalf("start call after the result = %+v, %v; want the result", got, err)
	}

	// Written at once: a lease above the lock-delay, and keys that name no call.
	for _, req := range []cardstore.ClaimRequest{
		{ProjectID: "p", Key: callKey("turn", "long"), Holder: "w1", Lease: workerLease + time.Nanosecond},
		{ProjectID: "p", Key: "atlas/state/tasks", Holder: "w1", Lease: time.Second},
	} {
		before := obs.txCount()
		if _, err := s.Claim(ctx, req); err != nil {
			t.Fatal(err)
		}
		if n := obs.txCount() - before; n != 1 {
			t.Fatalf("claim %+v made %d commits, want 1", req, n)
		}
		if rec := storedClaim(t, s, "p", req.Key); rec == nil || rec.Holder != "w1" || rec.Epoch != s.BootEpoch() {
			t.Fatalf("claim %+v is stored as %+v", req, rec)
		}
	}
}

// TestCallClaimRidesAlong: an in-memory claim is written by the next
// commit, whatever it carries, in that commit; a later change of the
// claim is written by the commit after.
func TestCallClaimRidesAlong(t *testing.T) {
	obs := &commits{}
	clk := &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	s, _ := openStore(t, boltstore.WithCommitObserver(obs), boltstore.WithClock(clk.Now))
	ctx := t.Context()
	call := storetest.ToolCallCard("p", "turn", "c1")
	if err := s.Put(ctx, call); err != nil {
		t.Fatal(err)
	}
	key := callKey("turn", "c1")
	res, err := s.StartCall(ctx, startReq(call, "w1", workerLease))
	if err != nil {
		t.Fatal(err)
	}
	before := obs.txCount()
	if err := s.Put(ctx, storetest.NoteCard("p", "other", "x")); err != nil {
		t.Fatal(err)
	}
	if n := obs.txCount() - before; n != 1 {
		t.Fatalf("an unrelated put made %d commits, want 1 (carrying the claim)", n)
	}
	rec := storedClaim(t, s, "p", key)
	if rec == nil || rec.Holder != "w1" || rec.Token != 1 || !rec.ExpiresAt.Equal(res.Claim.ExpiresAt) || rec.Epoch != 1 {
		t.Fatalf("stored claim after the next commit = %+v, want w1's, token 1, until %v, epoch 1", rec, res.Claim.ExpiresAt)
	}
	clk.Advance(2 * time.Second)
	renewed, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: key, Holder: "w1", Lease: workerLease})
	if err != nil {
		t.Fatal(err)
	}
	if rec := storedClaim(t, s, "p", key); !rec.ExpiresAt.Equal(res.Claim.ExpiresAt) {
		t.Fatalf("the renewal reached the bucket before a commit: %+v", rec)
	}
	if err := s.Put(ctx, storetest.NoteCard("p", "other", "y")); err != nil {
		t.Fatal(err)
	}
	if rec := storedClaim(t, s, "p", key); rec == nil || !rec.ExpiresAt.Equal(renewed.ExpiresAt) {
		t.Fatalf("stored claim after the renewal's commit = %+v, want until %v", rec, renewed.ExpiresAt)
	}
}

// TestCallClaimCommitsAlone: with no other write, an in-memory claim
// commits on its own (after the committer's Later delay), and a clean
// Close writes what is left, so the next Open has no lock-delay.
func TestCallClaimCommitsAlone(t *testing.T) {
	s, path := openStore(t)
	ctx := t.Context()
	call := storetest.ToolCallCard("p", "turn", "c1")
	if err := s.Put(ctx, call); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartCall(ctx, startReq(call, "w1", workerLease)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for storedClaim(t, s, "p", callKey("turn", "c1")) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the in-memory claim was never written")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Close writes a claim the Later delay has not written yet.
	other := storetest.ToolCallCard("p", "turn", "c2")
	if err := s.Put(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartCall(ctx, startReq(other, "w2", workerLease)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := reopen(t, path)
	if s2.BootEpoch() != 2 || !s2.LockDelayUntil().IsZero() {
		t.Fatalf("after a clean close: boot epoch %d, lock-delay until %v; want 2 and none", s2.BootEpoch(), s2.LockDelayUntil())
	}
	if g, err := s2.GetClaim(ctx, "p", callKey("turn", "c2")); err != nil || g.Holder != "w2" {
		t.Fatalf("claim closed in memory, after reopen = %+v, %v; want w2's", g, err)
	}
}

// TestLockDelay: after a crash, a call born before the boot whose claim
// may have been lost is not claimed by a new holder for one lock-delay
// (store clock), and its old holder cannot write a result under the lost
// claim; a durable live claim keeps its rules (held; its holder renews);
// a call born after the boot is not delayed. After the lock-delay, the
// calls are claimed as usual.
func TestLockDelay(t *testing.T) {
	ctx := t.Context()
	clk := &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	s, _ := openStore(t, boltstore.WithClock(clk.Now))
	if s.BootEpoch() != 1 || !s.LockDelayUntil().IsZero() {
		t.Fatalf("new file: boot epoch %d, lock-delay until %v; want 1 and none", s.BootEpoch(), s.LockDelayUntil())
	}
	lost := storetest.ToolCallCard("p", "turn", "lost")       // claimed in memory only
	idle := storetest.ToolCallCard("p", "turn", "idle")       // never claimed
	durable := storetest.ToolCallCard("p", "turn", "durable") // claim written before the crash
	lapsed := storetest.ToolCallCard("p", "turn", "lapsed")   // claim written, lease over at the restart
	if err := s.Put(ctx, lost, idle, durable, lapsed); err != nil {
		t.Fatal(err)
	}
	weather := subjects.ToolToken("weather.get")
	if _, err := s.StartCallTool(ctx, startReq(durable, "w-durable", workerLease), weather); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartCallTool(ctx, startReq(lapsed, "w-lapsed", time.Second), weather); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, storetest.NoteCard("p", "other", "commit")); err != nil { // writes both claims
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	lostClaim, err := s.StartCallTool(ctx, startReq(lost, "w-lost", workerLease), weather)
	if err != nil {
		t.Fatal(err)
	}
	s2 := reopen(t, crash(t, s), boltstore.WithClock(clk.Now))
	bootAt := clk.Now()
	if s2.BootEpoch() != 2 || !s2.LockDelayUntil().Equal(bootAt.Add(boltstore.DefaultLockDelay)) {
		t.Fatalf("after a crash: boot epoch %d, lock-delay until %v; want 2 and %v", s2.BootEpoch(), s2.LockDelayUntil(), bootAt.Add(boltstore.DefaultLockDelay))
	}
	born := storetest.ToolCallCard("p", "turn", "born") // born after the boot
	if err := s2.Put(ctx, born); err != nil {
		t.Fatal(err)
	}

	restarted := func(what string, err error) {
		t.Helper()
		var held *cardstore.ClaimHeldError
		if !errors.As(err, &held) || held.Holder != boltstore.RestartedHolder || !held.ExpiresAt.Equal(s2.LockDelayUntil()) {
			t.Fatalf("%s during the lock-delay = %v; want held by %q until %v", what, err, boltstore.RestartedHolder, s2.LockDelayUntil())
		}
	}
	for _, c := range []*card.Card{lost, idle, lapsed} {
		_, err := s2.StartCallTool(ctx, startReq(c, "w-new", workerLease), weather)
		restarted("start of "+c.ToolCallID, err)
		_, err = s2.Claim(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: callKey("turn", c.ToolCallID), Holder: "w-new", Lease: time.Minute})
		restarted("long claim of "+c.ToolCallID, err)
	}
	// The lost claim's holder: its renewal finds no claim to renew, and
	// its result is refused as a lost claim.
	_, err = s2.ClaimTool(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: callKey("turn", "lost"), Holder: "w-lost", Lease: workerLease}, weather)
	restarted("renewal of the lost claim", err)
	lostResult := storetest.ToolResultCard("p", "turn", "lost", card.StatusSuccess)
	if err := s2.PutToolResult(ctx, weather, "w-lost", lostClaim.Claim.Token, lostResult); !errors.Is(err, cardstore.ErrClaimLost) {
		t.Fatalf("result under the lost claim = %v, want ErrClaimLost", err)
	}
	// The lapsed lease's holder may not renew it either: a take-over may
	// have been lost.
	_, err = s2.ClaimTool(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: callKey("turn", "lapsed"), Holder: "w-lapsed", Lease: workerLease}, weather)
	restarted("renewal of a lapsed durable claim", err)
	// A durable live claim: held as before, renewed by its holder.
	var held *cardstore.ClaimHeldError
	if _, err := s2.StartCallTool(ctx, startReq(durable, "w-new", workerLease), weather); !errors.As(err, &held) || held.Holder != "w-durable" {
		t.Fatalf("start of a durably claimed call = %v, want held by w-durable", err)
	}
	if c, err := s2.ClaimTool(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: callKey("turn", "durable"), Holder: "w-durable", Lease: workerLease}, weather); err != nil || c.Token != 1 {
		t.Fatalf("renewal of a durable live claim = %+v, %v", c, err)
	}
	// Born after the boot: not delayed. A key with no tool.call card has
	// no birth to compare and is not delayed either.
	if c, err := s2.StartCallTool(ctx, startReq(born, "w-born", workerLease), weather); err != nil || c.Claim == nil {
		t.Fatalf("start of a call born after the boot = %+v, %v", c, err)
	}
	if _, err := s2.Claim(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: callKey("turn", "no-card"), Holder: "w-new", Lease: workerLease}); err != nil {
		t.Fatalf("claim of a call without a card = %v", err)
	}

	clk.Advance(boltstore.DefaultLockDelay - time.Nanosecond)
	_, err = s2.StartCallTool(ctx, startReq(idle, "w-new", workerLease), weather)
	restarted("start 1ns before the end of the lock-delay", err)
	clk.Advance(time.Nanosecond)
	for _, c := range []*card.Card{lost, idle, lapsed} {
		res, err := s2.StartCallTool(ctx, startReq(c, "w-new", workerLease), weather)
		if err != nil || res.Claim == nil {
			t.Fatalf("start of %s after the lock-delay = %+v, %v", c.ToolCallID, res, err)
		}
		if c == lapsed && (!res.Claim.TakenOver || res.Claim.Token != 2) {
			t.Fatalf("start of the lapsed call after the lock-delay = %+v, want a take-over with token 2", res.Claim)
		}
		if err := s2.PutToolResult(ctx, weather, "w-new", res.Claim.Token, storetest.ToolResultCard("p", "turn", c.ToolCallID, card.StatusSuccess)); err != nil {
			t.Fatalf("result of %s: %v", c.ToolCallID, err)
		}
	}
	if err := s2.PutToolResult(ctx, weather, "w-lost", lostClaim.Claim.Token, lostResult); !errors.Is(err, cardstore.ErrResultExists) {
		t.Fatalf("the lost claim's result after the new holder's = %v, want ErrResultExists", err)
	}
}

// TestLockDelayOff: WithLockDelay(0) keeps every claim durable at once and
// has no lock-delay after a crash; a negative or too long one is refused.
func TestLockDelayOff(t *testing.T) {
	ctx := t.Context()
	obs := &commits{}
	s, _ := openStore(t, boltstore.WithLockDelay(0), boltstore.WithCommitObserver(obs))
	call := storetest.ToolCallCard("p", "turn", "c1")
	if err := s.Put(ctx, call); err != nil {
		t.Fatal(err)
	}
	before := obs.txCount()
	if _, err := s.StartCall(ctx, startReq(call, "w1", workerLease)); err != nil {
		t.Fatal(err)
	}
	if n := obs.txCount() - before; n != 1 {
		t.Fatalf("start call without a lock-delay made %d commits, want 1", n)
	}
	if rec := storedClaim(t, s, "p", callKey("turn", "c1")); rec == nil || rec.Holder != "w1" {
		t.Fatalf("stored claim = %+v", rec)
	}
	other := storetest.ToolCallCard("p", "turn", "c2")
	if err := s.Put(ctx, other); err != nil {
		t.Fatal(err)
	}
	s2 := reopen(t, crash(t, s), boltstore.WithLockDelay(0))
	if !s2.LockDelayUntil().IsZero() {
		t.Fatalf("lock-delay until %v, want none", s2.LockDelayUntil())
	}
	if _, err := s2.StartCall(ctx, startReq(other, "w2", workerLease)); err != nil {
		t.Fatalf("start after a crash without a lock-delay: %v", err)
	}
	// A run with a lock-delay crashes; the next one, without, still waits
	// out the crashed run's.
	s3, _ := openStore(t)
	if err := s3.Put(ctx, call); err != nil {
		t.Fatal(err)
	}
	s4 := reopen(t, crash(t, s3), boltstore.WithLockDelay(0))
	if s4.LockDelayUntil().IsZero() {
		t.Fatal("no lock-delay after a crash of a run that had one")
	}
	var held *cardstore.ClaimHeldError
	if _, err := s4.StartCall(ctx, startReq(call, "w2", workerLease)); !errors.As(err, &held) || held.Holder != boltstore.RestartedHolder {
		t.Fatalf("start during the previous run's lock-delay = %v, want held by %q", err, boltstore.RestartedHolder)
	}
	for _, d := range []time.Duration{-time.Nanosecond, cardstore.MaxLease + time.Nanosecond} {
		if _, err := boltstore.Open(filepath.Join(t.TempDir(), "x.db"), boltstore.WithLockDelay(d)); !errors.Is(err, cardstore.ErrInvalid) {
			t.Fatalf("WithLockDelay(%v) = %v, want ErrInvalid", d, err)
		}
	}
}

// TestResultEndsInMemoryClaimForGood: the write of an in-memory claim
// never puts back a claim its result ended: not in the result's commit,
// not in later ones, not at Close, not after a reopen. Each worker renews
// its claim (each renewal queues a write) and then writes its result,
// while other writers commit all along.
func TestResultEndsInMemoryClaimForGood(t *testing.T) {
	s, path := openStore(t)
	ctx := t.Context()
	const calls = 50
	cards := make([]*card.Card, calls)
	for i := range cards {
		cards[i] = storetest.ToolCallCard("p", "turn", fmt.Sprintf("c%d", i))
	}
	if err := s.Put(ctx, cards...); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var writers, workers sync.WaitGroup
	for w := range 4 {
		writers.Go(func() { // unrelated commits carrying the claims' writes
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if err := s.Put(ctx, storetest.NoteCard("p", "other", fmt.Sprintf("%d-%d", w, i))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for i, c := range cards {
		holder := fmt.Sprintf("w%d", i)
		key := callKey("turn", c.ToolCallID)
		workers.Go(func() {
			if _, err := s.StartCall(ctx, startReq(c, holder, workerLease)); err != nil {
				t.Error(err)
				return
			}
			for range 10 {
				if _, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: key, Holder: holder, Lease: workerLease}); err != nil {
					t.Errorf("renewal: %v", err)
					return
				}
			}
			if err := s.Put(ctx, storetest.ToolResultCard("p", "turn", c.ToolCallID, card.StatusSuccess)); err != nil {
				t.Error(err)
			}
		})
	}
	workers.Wait()
	close(done)
	writers.Wait()
	ended := func(s *boltstore.Store, what string) {
		t.Helper()
		for _, c := range cards {
			key := callKey("turn", c.ToolCallID)
			if g, err := s.GetClaim(ctx, "p", key); !errors.Is(err, cardstore.ErrNotFound) {
				t.Fatalf("%s: claim on answered call %s = %+v, %v; want none", what, c.ToolCallID, g, err)
			}
			if rec := storedClaim(t, s, "p", key); rec == nil || !rec.Released || rec.Token != 1 {
				t.Fatalf("%s: the claims bucket holds %+v for answered call %s, want its tombstone", what, rec, c.ToolCallID)
			}
		}
	}
	ended(s, "after the results")
	if err := s.Put(ctx, storetest.NoteCard("p", "other", "last")); err != nil {
		t.Fatal(err)
	}
	ended(s, "after one more commit")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := reopen(t, path)
	ended(s2, "after reopen")
	for _, c := range cards {
		res, err := s2.StartCall(ctx, startReq(c, "late", workerLease))
		if err != nil || res.Result == nil {
			t.Fatalf("start of %s after reopen = %+v, %v; want its result", c.ToolCallID, res, err)
		}
	}
}

// TestDeleteTurnSeesInMemoryClaims: a turn whose call holds an in-memory
// claim is kept whole, as with a written one; once the result ends the
// claim, the turn is deleted with the tombstone.
func TestDeleteTurnSeesInMemoryClaims(t *testing.T) {
	s, _ := openStore(t)
	ctx := t.Context()
	call := storetest.ToolCallCard("p", "turn", "c1")
	if err := s.Put(ctx, call); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartCall(ctx, startReq(call, "w1", workerLease)); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteTurn(ctx, "p", "turn"); !errors.Is(err, cardstore.ErrClaimHeld) || n != 0 {
		t.Fatalf("delete of a turn with an in-memory claim = %d, %v; want ErrClaimHeld", n, err)
	}
	if _, err := s.Get(ctx, "p", call.CardID); err != nil {
		t.Fatalf("the refused delete removed the call card: %v", err)
	}
	if err := s.Put(ctx, storetest.ToolResultCard("p", "turn", "c1", card.StatusSuccess)); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteTurn(ctx, "p", "turn"); err != nil || n != 2 {
		t.Fatalf("delete after the result = %d, %v; want 2 cards", n, err)
	}
	if rec := storedClaim(t, s, "p", callKey("turn", "c1")); rec != nil {
		t.Fatalf("the tombstone outlived its turn: %+v", rec)
	}
}
