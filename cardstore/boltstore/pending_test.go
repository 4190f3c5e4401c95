package boltstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/card"
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

// TestStartCallEarly: StartCallEarly of a call whose card is announced
// and not stored starts the call on the announced card at once, with the
// claim and a copy of the card; reads are unchanged until the card's
// commit, and the result then commits as any other. A card the Put would
// refuse (too large) is not announced (the call starts without a card),
// and another call's announced card is waited for, not started on.
func TestStartCallEarly(t *testing.T) {
	s, _ := openStore(t, boltstore.WithMaxCardBytes(4096))
	ctx := t.Context()
	c := storetest.ToolCallCard("p", "turn", "c1")
	done := s.AnnouncePut(c)
	res, err := s.StartCallEarly(ctx, startReq(c, "w1", workerLease))
	if err != nil || res.Claim == nil || res.Claim.Token != 1 || res.CallCard == nil || res.CallCard.CardID != c.CardID || res.CallCard == c {
		t.Fatalf("StartCallEarly on the announced card = %+v, %v; want the claim and a copy of the card", res, err)
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

	big := storetest.ToolCallCard("p", "turn", "big")
	big.Content = json.RawMessage(`{"tool_name":"weather.get","arguments":{"x":"` + strings.Repeat("x", 8192) + `"}}`)
	done = s.AnnouncePut(big)
	if res, err := s.StartCallEarly(ctx, startReq(big, "w1", workerLease)); err != nil || res.Claim == nil || res.CallCard != nil {
		t.Fatalf("StartCallEarly of a card too large to store = %+v, %v; want a claim without a card", res, err)
	}
	done(cardstore.ErrTooLarge)

	// Another call's announced card is not started on: StartCallEarly
	// waits for its Put as StartCall does, and call b's result stores
	// nothing of call a's.
	a := storetest.ToolCallCard("p", "turn", "a")
	done = s.AnnouncePut(a)
	other := storetest.ToolCallCard("p", "turn", "b")
	other.CardID = a.CardID
	waits := waiting(s)
	got := make(chan startOutcome, 1)
	go func() {
		var o startOutcome
		o.res, o.err = s.StartCallEarly(ctx, startReq(other, "w1", workerLease))
		got <- o
	}()
	<-waits
	if err := s.PutWithCommand(ctx, a, boltstore.Message{Subject: "cg.v1r3.p.c.cmd.tool.echo"}); err != nil {
		t.Fatal(err)
	}
	done(nil)
	if o := <-got; o.err != nil || o.res.Claim == nil {
		t.Fatalf("StartCallEarly naming another call's announced card = %+v, %v; want a claim", o.res, o.err)
	}
	if err := s.Put(ctx, storetest.ToolResultCard("p", "turn", "b", card.StatusSuccess)); err != nil {
		t.Fatal(err)
	}
	if got := outboxCalls(t, s, time.Time{}); len(got) != 1 || got[0] != "a" {
		t.Fatalf("outbox %v, want call a's entry", got)
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
	if _, err := s.StartCallEarly(ctx, startReq(c, "w1", workerLease)); err != nil {
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
	if _, err := s.StartCallEarly(ctx, startReq(ok, "w1", workerLease)); err != nil {
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
			done := s.AnnouncePut(c)
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
			done(nil)
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
	first, second := s.AnnouncePut(failed), s.AnnouncePut(failed)
	got := startAsync(ctx, s, startReq(failed, "w1", workerLease), "")
	<-waits
	first(nil)
	first(nil) // idempotent: the second announcement still holds
	select {
	case o := <-got:
		t.Fatalf("StartCall answered %+v, %v while a Put was still announced", o.res, o.err)
	default:
	}
	second(nil)
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
	done := s.AnnouncePut(c)
	defer done(nil)
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
	done := s2.AnnouncePut(late)
	weather := subjects.ToolToken("weather.get")
	got := startAsync(ctx, s2, startReq(late, "w1", workerLease), weather)
	<-waits
	if err := s2.Put(ctx, late); err != nil {
		t.Fatal(err)
	}
	done(nil)
	if o := <-got; o.err != nil || o.res.Claim == nil || o.res.CallCard == nil {
		t.Fatalf("a call whose card landed during its StartCall, in the lock-delay = %+v, %v; want the claim and the card", o.res, o.err)
	}
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
	res, err := s.StartCallEarly(ctx, startReq(c, "w1", workerLease))
	if err != nil || res.CallCard == nil {
		t.Fatalf("StartCallEarly on the announced card = %+v, %v", res, err)
	}
	for boltstore.WaitingWrites(s) < 2 { // the card's and the claim's
		time.Sleep(100 * time.Microsecond)
	}
	if err := s.Put(ctx, storetest.ToolResultCard("p", "turn", "c1", card.StatusSuccess)); err != nil {
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
