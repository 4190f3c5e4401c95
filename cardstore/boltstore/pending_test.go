package boltstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/subjects"
)

// startAsync runs StartCallTool (tool "" : StartCall) in a goroutine.
func startAsync(ctx context.Context, s *boltstore.Store, req cardstore.StartCallRequest, tool string) <-chan startOutcome {
	out := make(chan startOutcome, 1)
	go func() {
		var o startOutcome
		if tool == "" {
			o.res, o.err = s.StartCall(ctx, req)
		} else {
			o.res, o.err = s.StartCallTool(ctx, req, tool)
		}
		out <- o
	}()
	return out
}

type startOutcome struct {
	res *cardstore.StartCallResult
	err error
}

// waiting returns a hook for SetAwaitHook and a channel that receives
// once per wait.
func waiting(s *boltstore.Store) <-chan struct{} {
	ch := make(chan struct{}, 8)
	boltstore.SetAwaitHook(s, func() { ch <- struct{}{} })
	return ch
}

// TestStartCallWaitsForAnnouncedPut: a StartCall that does not find the
// call's card while a Put of it is announced waits for that Put, then
// decides with the card: it claims the call with the card, and a worker
// of another tool is refused (the card says whose call it is) instead of
// claiming it before the card lands.
func TestStartCallWaitsForAnnouncedPut(t *testing.T) {
	weather := subjects.ToolToken("weather.get")
	for _, tc := range []struct {
		name, tool string
		wantErr    error
	}{
		{"StartCall", "", nil},
		{"StartCallTool of the card's tool", weather, nil},
		{"StartCallTool of another tool", "echo", cardstore.ErrForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := openStore(t)
			ctx := t.Context()
			waits := waiting(s)
			c := storetest.ToolCallCard("p", "turn", "c1")
			done := s.AnnouncePut("p", c.CardID)
			got := startAsync(ctx, s, startReq(c, "w1", workerLease), tc.tool)
			<-waits // the StartCall read no card and waits for the Put
			select {
			case o := <-got:
				t.Fatalf("StartCall answered %+v, %v before the announced Put ended", o.res, o.err)
			default:
			}
			if err := s.Put(ctx, c); err != nil {
				t.Fatal(err)
			}
			done()
			o := <-got
			if tc.wantErr != nil {
				if !errors.Is(o.err, tc.wantErr) {
					t.Fatalf("StartCall after the Put = %+v, %v; want %v", o.res, o.err, tc.wantErr)
				}
				if _, err := s.GetClaim(ctx, "p", callKey("turn", "c1")); !errors.Is(err, cardstore.ErrNotFound) {
					t.Fatalf("the refused worker left a claim: %v", err)
				}
				return
			}
			if o.err != nil || o.res.Claim == nil || o.res.Claim.Token != 1 || o.res.CallCard == nil || o.res.CallCard.CardID != c.CardID {
				t.Fatalf("StartCall after the Put = %+v, %v; want the claim and the card", o.res, o.err)
			}
		})
	}
}

// TestStartCallNoAnnouncedPut: without an announced Put, a StartCall that
// finds no card does not wait: it claims the call without a card, as
// before. So does one whose announced Put ended (failed) without a card;
// and a Put announced twice is waited for until both ended.
func TestStartCallNoAnnouncedPut(t *testing.T) {
	s, _ := openStore(t)
	ctx := t.Context()
	waits := waiting(s)
	c := storetest.ToolCallCard("p", "turn", "none")
	res, err := s.StartCall(ctx, startReq(c, "w1", workerLease))
	if err != nil || res.Claim == nil || res.CallCard != nil {
		t.Fatalf("StartCall without the card = %+v, %v; want a claim without a card", res, err)
	}
	select {
	case <-waits:
		t.Fatal("StartCall waited although no Put was announced")
	default:
	}

	failed := storetest.ToolCallCard("p", "turn", "failed")
	first, second := s.AnnouncePut("p", failed.CardID), s.AnnouncePut("p", failed.CardID)
	got := startAsync(ctx, s, startReq(failed, "w1", workerLease), "")
	<-waits
	first()
	first() // idempotent: the second announcement still holds
	select {
	case o := <-got:
		t.Fatalf("StartCall answered %+v, %v while a Put was still announced", o.res, o.err)
	default:
	}
	second()
	o := <-got
	if o.err != nil || o.res.Claim == nil || o.res.CallCard != nil {
		t.Fatalf("StartCall after the announced Puts ended without a card = %+v, %v; want a claim without a card", o.res, o.err)
	}
	// Nothing is left announced: the next StartCall does not wait.
	other := storetest.ToolCallCard("p", "turn", "failed2")
	other.CardID = failed.CardID
	if _, err := s.StartCall(ctx, startReq(other, "w2", workerLease)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waits:
		t.Fatal("StartCall waited for a Put whose announcement ended")
	default:
	}
}

// TestStartCallWaitBoundedByContext: the wait for an announced Put ends
// with the StartCall's context, and takes no claim.
func TestStartCallWaitBoundedByContext(t *testing.T) {
	s, _ := openStore(t)
	waits := waiting(s)
	c := storetest.ToolCallCard("p", "turn", "c1")
	done := s.AnnouncePut("p", c.CardID)
	defer done()
	ctx, cancel := context.WithCancel(t.Context())
	got := startAsync(ctx, s, startReq(c, "w1", workerLease), "")
	<-waits
	cancel()
	if o := <-got; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("StartCall whose context ended while it waited = %+v, %v; want context.Canceled", o.res, o.err)
	}
	if _, err := s.GetClaim(t.Context(), "p", callKey("turn", "c1")); !errors.Is(err, cardstore.ErrNotFound) {
		t.Fatalf("a canceled wait left a claim: %v", err)
	}
}

// TestStartCallAnnouncedPutInLockDelay: after a crash, during the
// lock-delay, a call whose card lands while its StartCall waits is born
// after the boot (its card's turns index entry is newer than the boot):
// it is claimed at once, while a call born before the crash is still
// refused.
func TestStartCallAnnouncedPutInLockDelay(t *testing.T) {
	ctx := t.Context()
	clk := &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	s, _ := openStore(t, boltstore.WithClock(clk.Now))
	old := storetest.ToolCallCard("p", "turn", "old")
	if err := s.Put(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartCall(ctx, startReq(old, "w-old", workerLease)); err != nil {
		t.Fatal(err)
	}
	s2 := reopen(t, crash(t, s), boltstore.WithClock(clk.Now))
	if s2.LockDelayUntil().IsZero() {
		t.Fatal("no lock-delay after a crash with a claim in memory")
	}
	waits := waiting(s2)
	late := storetest.ToolCallCard("p", "turn", "late")
	done := s2.AnnouncePut("p", late.CardID)
	weather := subjects.ToolToken("weather.get")
	got := startAsync(ctx, s2, startReq(late, "w1", workerLease), weather)
	<-waits
	if err := s2.Put(ctx, late); err != nil {
		t.Fatal(err)
	}
	done()
	if o := <-got; o.err != nil || o.res.Claim == nil || o.res.CallCard == nil {
		t.Fatalf("a call whose card landed during its StartCall, in the lock-delay = %+v, %v; want the claim and the card", o.res, o.err)
	}
	var held *cardstore.ClaimHeldError
	if _, err := s2.StartCallTool(ctx, startReq(old, "w2", workerLease), weather); !errors.As(err, &held) || held.Holder != boltstore.RestartedHolder {
		t.Fatalf("a call born before the crash, in the lock-delay = %v; want refused by %q", err, boltstore.RestartedHolder)
	}
}
