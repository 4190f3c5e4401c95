package boltstore_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestStartCallRacesResult: a StartCall racing the commit of the call's
// result either gets the result or a claim the result then ends; never a
// claim that outlives the result (the result check and the in-memory
// claim are atomic).
func TestStartCallRacesResult(t *testing.T) {
	ctx := t.Context()
	clk := &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	s, _ := openStore(t, boltstore.WithClock(clk.Now))
	const calls = 200
	cards := make([]*card.Card, calls)
	for i := range cards {
		cards[i] = storetest.ToolCallCard("p", "turn", fmt.Sprintf("c%d", i))
	}
	if err := s.Put(ctx, cards...); err != nil {
		t.Fatal(err)
	}
	for _, c := range cards {
		if _, err := s.StartCall(ctx, startReq(c, "w1", workerLease)); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(workerLease) // every lease is over: a second worker may take each call over
	var wg sync.WaitGroup
	var claims, results atomic.Int64
	for _, c := range cards {
		wg.Go(func() {
			if err := s.Put(ctx, storetest.ToolResultCard("p", "turn", c.ToolCallID, card.StatusSuccess)); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			res, err := s.StartCall(ctx, startReq(c, "w2", workerLease))
			switch {
			case err != nil:
				t.Error(err)
			case res.Claim != nil:
				claims.Add(1)
			case res.Result != nil:
				results.Add(1)
			}
		})
	}
	wg.Wait()
	if err := s.Put(ctx, storetest.NoteCard("p", "other", "flush")); err != nil {
		t.Fatal(err)
	}
	for _, c := range cards {
		key := callKey("turn", c.ToolCallID)
		if g, err := s.GetClaim(ctx, "p", key); !errors.Is(err, cardstore.ErrNotFound) {
			t.Fatalf("call %s has a result and the claim %+v (%v)", c.ToolCallID, g, err)
		}
		if rec := storedClaim(t, s, "p", key); rec == nil || !rec.Released {
			t.Fatalf("call %s: stored claim %+v, want a tombstone", c.ToolCallID, rec)
		}
	}
	t.Logf("second starts: %d took the claim before the result, %d found the result", claims.Load(), results.Load())
}

// TestRestartRace: a call claimed in memory when the store crashed is run
// once more, by one worker, after the lock-delay: racing workers are
// refused during it, exactly one of them gets the claim after it, the
// worker whose claim was lost cannot write its result, and the call has
// one result.
func TestRestartRace(t *testing.T) {
	ctx := t.Context()
	clk := &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	s, _ := openStore(t, boltstore.WithClock(clk.Now))
	call := storetest.ToolCallCard("p", "turn", "c1")
	if err := s.Put(ctx, call); err != nil {
		t.Fatal(err)
	}
	weather := subjects.ToolToken("weather.get")
	before, err := s.StartCallTool(ctx, startReq(call, "old/1", workerLease), weather)
	if err != nil {
		t.Fatal(err)
	}
	s2 := reopen(t, crash(t, s), boltstore.WithClock(clk.Now))

	const racers = 8
	var executions atomic.Int64
	race := func() {
		var wg sync.WaitGroup
		for r := range racers {
			wg.Go(func() {
				holder := fmt.Sprintf("new/%d", r)
				res, err := s2.StartCallTool(ctx, startReq(call, holder, workerLease), weather)
				var held *cardstore.ClaimHeldError
				switch {
				case errors.As(err, &held):
					return // the worker naks and retries later
				case err != nil:
					t.Error(err)
					return
				case res.Result != nil:
					return
				}
				executions.Add(1)
				if err := s2.PutToolResult(ctx, weather, holder, res.Claim.Token, storetest.ToolResultCard("p", "turn", "c1", card.StatusSuccess)); err != nil {
					t.Errorf("result of the new holder: %v", err)
				}
			})
		}
		wg.Go(func() { // the worker from before the crash finishes meanwhile
			err := s2.PutToolResult(ctx, weather, "old/1", before.Claim.Token, storetest.ToolResultCard("p", "turn", "c1", card.StatusSuccess))
			if !errors.Is(err, cardstore.ErrClaimLost) && !errors.Is(err, cardstore.ErrResultExists) {
				t.Errorf("result under the lost claim = %v, want ErrClaimLost or ErrResultExists", err)
			}
		})
		wg.Wait()
	}
	race()
	if n := executions.Load(); n != 0 {
		t.Fatalf("%d workers ran the call during the lock-delay, want none", n)
	}
	clk.Advance(boltstore.DefaultLockDelay)
	race()
	race()
	if n := executions.Load(); n != 1 {
		t.Fatalf("%d workers ran the call after the lock-delay, want exactly 1", n)
	}
	all, err := cardstore.AllTurn(ctx, s2, "p", "turn")
	if err != nil {
		t.Fatal(err)
	}
	results := 0
	for _, c := range all {
		if c.Type == card.TypeToolResult {
			results++
		}
	}
	if results != 1 {
		t.Fatalf("the call has %d tool.result cards, want 1", results)
	}
}
