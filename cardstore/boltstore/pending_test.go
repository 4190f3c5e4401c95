package boltstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestStartCallOnAnnouncedCard: a StartCall that does not find the call's
// card while a Put of it is announced starts the call on the announced
// card at once: it claims the call with the card, and a worker of another
// tool is refused (the card says whose call it is). Reads are unchanged
// until the card's commit, and the result then commits as any other.
func TestStartCallOnAnnouncedCard(t *testing.T) {
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
			c := storetest.ToolCallCard("p", "turn", "c1")
			done := s.AnnouncePut(c)
			var res *cardstore.StartCallResult
			var err error
			if tc.tool == "" {
				res, err = s.StartCall(ctx, startReq(c, "w1", workerLease))
			} else {
				res, err = s.StartCallTool(ctx, startReq(c, "w1", workerLease), tc.tool)
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("StartCall on the announced card = %+v, %v; want %v", res, err, tc.wantErr)
				}
				if _, err := s.GetClaim(ctx, "p", callKey("turn", "c1")); !errors.Is(err, cardstore.ErrNotFound) {
					t.Fatalf("the refused worker left a claim: %v", err)
				}
				done(nil)
				return
			}
			if err != nil || res.Claim == nil || res.Claim.Token != 1 || res.CallCard == nil || res.CallCard.CardID != c.CardID {
				t.Fatalf("StartCall on the announced card = %+v, %v; want the claim and the card", res, err)
			}
			if _, err := s.Get(ctx, "p", c.CardID); !errors.Is(err, cardstore.ErrNotFound) {
				t.Fatalf("Get of a card whose commit has not ended: %v, want ErrNotFound", err)
			}
			if err := s.Put(ctx, c); err != nil {
				t.Fatal(err)
			}
			done(nil)
			if err := s.Put(ctx, storetest.ToolResultCard("p", "turn", "c1", card.StatusSuccess)); err != nil {
				t.Fatalf("the result of a call started on its announced card: %v", err)
			}
		})
	}
}

// TestResultStoresAnnouncedCard: a call started on an announced card
// whose Put then fails (or has not been queued yet) has its card stored
// by its result's commit, before the result in the turn; the card's Put
// that comes after finds it (an idempotent repeat, no outbox entry). A
// call whose announced Put stored the card adds nothing to its result.
func TestResultStoresAnnouncedCard(t *testing.T) {
	s, _ := openStore(t)
	ctx := t.Context()
	c := storetest.ToolCallCard("p", "turn", "c1")
	done := s.AnnouncePut(c)
	if _, err := s.StartCall(ctx, startReq(c, "w1", workerLease)); err != nil {
		t.Fatal(err)
	}
	done(errors.New("the disk is gone"))
	done(nil) // idempotent: the first outcome stands
	result := storetest.ToolResultCard("p", "turn", "c1", card.StatusSuccess)
	if err := s.Put(ctx, result); err != nil {
		t.Fatalf("the result of a call whose announced card was not stored: %v", err)
	}
	page, err := s.ListTurn(ctx, cardstore.ListTurnRequest{ProjectID: "p", AgentTurnID: "turn"})
	if err != nil {
		t.Fatal(err)
	}
	if got := page.Cards; len(got) != 2 || got[0].CardID != c.CardID || got[1].CardID != result.CardID {
		t.Fatalf("turn after the result has %d cards, want the call card, then the result", len(got))
	}
	// The card's Put that comes late (or the agent's resend) repeats it.
	if err := s.PutWithCommand(ctx, c, boltstore.Message{Subject: "cg.v1r3.p.c.cmd.tool.echo"}); err != nil {
		t.Fatal(err)
	}
	if got := outboxCalls(t, s, time.Time{}); len(got) != 0 {
		t.Fatalf("outbox %v for a call with a result, want empty", got)
	}

	ok := storetest.ToolCallCard("p", "turn", "c2")
	done = s.AnnouncePut(ok)
	if _, err := s.StartCall(ctx, startReq(ok, "w1", workerLease)); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, ok); err != nil {
		t.Fatal(err)
	}
	done(nil)
	if err := s.Put(ctx, storetest.ToolResultCard("p", "turn", "c2", card.StatusSuccess)); err != nil {
		t.Fatalf("the result of a call whose announced card was stored: %v", err)
	}
}

// TestStartCallNoAnnouncedPut: without an announced Put, a StartCall that
// finds no card claims the call without a card, as before; so does one
// after the announced Puts of the card ended without storing it (a Put
// announced twice stays announced until both ended).
func TestStartCallNoAnnouncedPut(t *testing.T) {
	s, _ := openStore(t)
	ctx := t.Context()
	c := storetest.ToolCallCard("p", "turn", "none")
	res, err := s.StartCall(ctx, startReq(c, "w1", workerLease))
	if err != nil || res.Claim == nil || res.CallCard != nil {
		t.Fatalf("StartCall without the card = %+v, %v; want a claim without a card", res, err)
	}

	failed := storetest.ToolCallCard("p", "turn", "failed")
	first, second := s.AnnouncePut(failed), s.AnnouncePut(failed)
	first(nil)
	first(nil) // idempotent: the second announcement still holds
	if res, err := s.StartCall(ctx, startReq(failed, "w1", workerLease)); err != nil || res.CallCard == nil {
		t.Fatalf("StartCall while a Put is still announced = %+v, %v; want the announced card", res, err)
	}
	second(nil)
	other := storetest.ToolCallCard("p", "turn", "failed2")
	other.CardID = failed.CardID
	if res, err := s.StartCall(ctx, startReq(other, "w2", workerLease)); err != nil || res.Claim == nil || res.CallCard != nil {
		t.Fatalf("StartCall after the announced Puts ended without a card = %+v, %v; want a claim without a card", res, err)
	}
}

// TestStartCallAnnouncedPutInLockDelay: after a crash, during the
// lock-delay, a call started on its announced card is born after the boot
// (it has no stored card from before): it is claimed at once, while a
// call born before the crash is still refused.
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
	late := storetest.ToolCallCard("p", "turn", "late")
	done := s2.AnnouncePut(late)
	weather := subjects.ToolToken("weather.get")
	if res, err := s2.StartCallTool(ctx, startReq(late, "w1", workerLease), weather); err != nil || res.Claim == nil || res.CallCard == nil {
		t.Fatalf("a call started on its announced card, in the lock-delay = %+v, %v; want the claim and the card", res, err)
	}
	if err := s2.Put(ctx, late); err != nil {
		t.Fatal(err)
	}
	done(nil)
	var held *cardstore.ClaimHeldError
	if _, err := s2.StartCallTool(ctx, startReq(old, "w2", workerLease), weather); !errors.As(err, &held) || held.Holder != boltstore.RestartedHolder {
		t.Fatalf("a call born before the crash, in the lock-delay = %v; want refused by %q", err, boltstore.RestartedHolder)
	}
}

// TestDispatchLingerOneCommit: with a dispatch linger, the commit of a
// dispatch's card (PutWithCommand) waits for company: a worker starts the
// call on the announced card, and its result shares the card's commit
// (with the claim), after which the outbox is empty and the file
// consistent. Without company the card commits alone once the linger has
// passed.
func TestDispatchLingerOneCommit(t *testing.T) {
	ctx := t.Context()
	obs := &commits{}
	s, _ := openStore(t, boltstore.WithCommitObserver(obs), boltstore.WithDispatchLinger(boltstore.MaxDispatchLinger))
	c := storetest.ToolCallCard("p", "turn", "c1")
	done := s.AnnouncePut(c)
	put := make(chan error, 1)
	go func() { put <- s.PutWithCommand(ctx, c, boltstore.Message{Subject: "cg.v1r3.p.c.cmd.tool.echo"}) }()
	weather := subjects.ToolToken("weather.get")
	res, err := s.StartCallTool(ctx, startReq(c, "w1", workerLease), weather)
	if err != nil || res.CallCard == nil {
		t.Fatalf("StartCall on the announced card = %+v, %v", res, err)
	}
	for boltstore.WaitingWrites(s) < 2 { // the card's and the claim's
		time.Sleep(100 * time.Microsecond)
	}
	if err := s.PutToolResult(ctx, weather, "w1", res.Claim.Token, storetest.ToolResultCard("p", "turn", "c1", card.StatusSuccess)); err != nil {
		t.Fatal(err)
	}
	if err := <-put; err != nil {
		t.Fatal(err)
	}
	done(nil)
	obs.mu.Lock()
	txs := obs.txs
	obs.mu.Unlock()
	if txs != 1 {
		t.Fatalf("%d commits for the card and its result, want 1", txs)
	}
	if got := outboxCalls(t, s, time.Time{}); len(got) != 0 {
		t.Fatalf("outbox %v after the result, want empty", got)
	}
	if _, err := s.Get(ctx, "p", c.CardID); err != nil {
		t.Fatalf("the card after the shared commit: %v", err)
	}

	s2, _ := openStore(t, boltstore.WithDispatchLinger(time.Millisecond))
	lone := storetest.ToolCallCard("p", "turn", "c2")
	if err := s2.PutWithCommand(ctx, lone, boltstore.Message{Subject: "cg.v1r3.p.c.cmd.tool.echo"}); err != nil {
		t.Fatal(err)
	}
	if got := outboxCalls(t, s2, time.Time{}); len(got) != 1 {
		t.Fatalf("outbox %v after a lone dispatch, want its entry", got)
	}
}
