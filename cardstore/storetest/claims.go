package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// shortLease is the lease of claims the tests wait to expire.
const shortLease = 150 * time.Millisecond

// pollDeadline bounds every wait for a lease to expire; it is far longer
// than shortLease so that slow machines do not fail the suite.
const pollDeadline = 30 * time.Second

func testClaims(t *testing.T, s cardstore.Store) {
	const p = "proj-claims"
	ctx := t.Context()
	key := cardstore.ToolCallKey("turn-1", "call-1")
	req := func(holder string) cardstore.ClaimRequest {
		return cardstore.ClaimRequest{ProjectID: p, Key: key, Holder: holder, Lease: time.Minute}
	}

	c, err := s.Claim(ctx, req("w1"))
	if err != nil {
		t.Fatal(err)
	}
	if c.ProjectID != p || c.Key != key || c.Holder != "w1" || c.Token != 1 || c.TakenOver || c.PreviousHolder != "" || c.ExpiresAt.IsZero() {
		t.Fatalf("first claim = %+v, want w1 with token 1", c)
	}
	r, err := s.Claim(ctx, req("w1"))
	if err != nil {
		t.Fatalf("renew: %v", err)
	}
	if r.Holder != "w1" || r.Token != 1 || r.TakenOver {
		t.Fatalf("renewal = %+v, want w1 with token 1 unchanged", r)
	}

	_, err = s.Claim(ctx, req("w2"))
	wantErr(t, "claim held by another", err, cardstore.ErrClaimHeld)
	var held *cardstore.ClaimHeldError
	if !errors.As(err, &held) {
		t.Fatalf("ErrClaimHeld error %v is not a *ClaimHeldError", err)
	}
	if held.Holder != "w1" || held.ExpiresAt.IsZero() {
		t.Errorf("ClaimHeldError = %+v, want holder w1 and its expiry", held)
	}

	wantErr(t, "release by a non-holder", s.Release(ctx, p, key, "w2"), cardstore.ErrClaimLost)
	wantErr(t, "release of an unknown key", s.Release(ctx, p, "other-key", "w1"), cardstore.ErrClaimLost)
	if err := s.Release(ctx, p, key, "w1"); err != nil {
		t.Fatalf("release by the holder: %v", err)
	}
	wantErr(t, "second release", s.Release(ctx, p, key, "w1"), cardstore.ErrClaimLost)

	c, err = s.Claim(ctx, req("w2"))
	if err != nil {
		t.Fatalf("claim after release: %v", err)
	}
	if c.Holder != "w2" || c.TakenOver {
		t.Errorf("claim after release = %+v, want w2, not a take-over", c)
	}
}

// awaitTakeOver claims key for holder until the current holder's lease has
// expired, and fails on any error but ErrClaimHeld.
func awaitTakeOver(t *testing.T, s cardstore.Store, req cardstore.ClaimRequest) *cardstore.Claim {
	t.Helper()
	deadline := time.Now().Add(pollDeadline)
	for {
		c, err := s.Claim(t.Context(), req)
		if err == nil {
			return c
		}
		if !errors.Is(err, cardstore.ErrClaimHeld) {
			t.Fatalf("claim by %s while waiting for expiry: %v", req.Holder, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim by %s: lease of %v never expired within %v: %v", req.Holder, shortLease, pollDeadline, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testClaimTakeOver(t *testing.T, s cardstore.Store) {
	const p = "proj-takeover"
	ctx := t.Context()
	key := "k/take-over"
	req := func(holder string, lease time.Duration) cardstore.ClaimRequest {
		return cardstore.ClaimRequest{ProjectID: p, Key: key, Holder: holder, Lease: lease}
	}
	if _, err := s.Claim(ctx, req("w1", shortLease)); err != nil {
		t.Fatal(err)
	}
	for i, holder := range []string{"w2", "w3"} {
		c := awaitTakeOver(t, s, req(holder, shortLease))
		prev := []string{"w1", "w2"}[i]
		if c.Holder != holder || !c.TakenOver || c.PreviousHolder != prev || c.Token != uint64(i+2) {
			t.Fatalf("take-over = %+v, want %s taking over from %s with token %d", c, holder, prev, i+2)
		}
	}
	// The last holder renews with a long lease; the ones taken over have
	// lost the claim.
	c, err := s.Claim(ctx, req("w3", time.Minute))
	if err != nil {
		t.Fatalf("renew after take-over: %v", err)
	}
	if c.Token != 3 || c.TakenOver {
		t.Errorf("renewal after take-over = %+v, want token 3, not taken over", c)
	}
	wantErr(t, "release by a holder taken over", s.Release(ctx, p, key, "w1"), cardstore.ErrClaimLost)
	_, err = s.Claim(ctx, req("w1", time.Minute))
	var held *cardstore.ClaimHeldError
	if !errors.As(err, &held) || held.Holder != "w3" {
		t.Fatalf("claim by a holder taken over: got %v, want ErrClaimHeld by w3", err)
	}

	// An expired claim is still its holder's until someone takes it over:
	// the holder may renew it (same token) or release it. The probe key is
	// claimed last, so once it can be taken over both others have lapsed
	// as the store's clock sees it.
	for _, k := range []string{"k/lapsed-1", "k/lapsed-2", "k/probe"} {
		if _, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: k, Holder: "w4", Lease: shortLease}); err != nil {
			t.Fatal(err)
		}
	}
	awaitTakeOver(t, s, cardstore.ClaimRequest{ProjectID: p, Key: "k/probe", Holder: "w5", Lease: time.Minute})
	c, err = s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: "k/lapsed-1", Holder: "w4", Lease: time.Minute})
	if err != nil {
		t.Fatalf("renewal of a lapsed claim by its holder: %v", err)
	}
	if c.Token != 1 || c.TakenOver {
		t.Errorf("renewal of a lapsed claim = %+v, want token 1, not taken over", c)
	}
	if err := s.Release(ctx, p, "k/lapsed-2", "w4"); err != nil {
		t.Fatalf("release of a lapsed claim by its holder: %v", err)
	}
}

func testConcurrency(t *testing.T, s cardstore.Store) {
	const p = "proj-conc"
	const writers, perWriter, racers = 32, 8, 16
	ctx := t.Context()
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter)

	// Distinct cards from many writers.
	written := make([][]*card.Card, writers)
	for w := range writers {
		wg.Go(func() {
			<-start
			turn := fmt.Sprintf("turn-w%d", w)
			for i := range perWriter {
				var c *card.Card
				if i%2 == 0 {
					c = ToolCallCard(p, turn, fmt.Sprintf("call-%d", i))
				} else {
					c = ToolResultCard(p, turn, fmt.Sprintf("call-%d", i-1), card.StatusSuccess)
				}
				if err := s.Put(ctx, c); err != nil {
					errs <- fmt.Errorf("writer %d put %d: %w", w, i, err)
					return
				}
				written[w] = append(written[w], c)
			}
		})
	}
	// The same tool.result pair, raced with different card ids.
	results := make([]*card.Card, racers)
	resultErrs := make([]error, racers)
	for i := range racers {
		results[i] = ToolResultCard(p, "turn-race", "call-race", card.StatusSuccess)
		wg.Go(func() {
			<-start
			resultErrs[i] = s.Put(ctx, results[i])
		})
	}
	// One key, raced by many holders.
	claims := make([]*cardstore.Claim, racers)
	claimErrs := make([]error, racers)
	for i := range racers {
		wg.Go(func() {
			<-start
			claims[i], claimErrs[i] = s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: "race", Holder: fmt.Sprintf("w%d", i), Lease: time.Minute})
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}

	for w := range writers {
		all, err := cardstore.AllTurn(ctx, s, p, fmt.Sprintf("turn-w%d", w))
		if err != nil {
			t.Fatal(err)
		}
		sameCards(t, fmt.Sprintf("turn of writer %d", w), all, written[w])
	}

	var winner *card.Card
	for i, err := range resultErrs {
		switch {
		case err == nil && winner == nil:
			winner = results[i]
		case err == nil:
			t.Errorf("two results of one call were both accepted: %s and %s", winner.CardID, results[i].CardID)
		case !errors.Is(err, cardstore.ErrResultExists):
			t.Errorf("racing result %d: got %v, want nil or ErrResultExists", i, err)
		}
	}
	if winner == nil {
		t.Fatal("no racing result was accepted")
	}
	got, err := s.FindToolResult(ctx, p, "turn-race", "call-race")
	if err != nil {
		t.Fatal(err)
	}
	sameCard(t, "result after the race", got, winner)

	var holder string
	for i, err := range claimErrs {
		switch {
		case err == nil && holder == "":
			holder = claims[i].Holder
			if claims[i].Token != 1 {
				t.Errorf("winning claim token %d, want 1", claims[i].Token)
			}
		case err == nil:
			t.Errorf("two holders got one claim: %s and %s", holder, claims[i].Holder)
		case !errors.Is(err, cardstore.ErrClaimHeld):
			t.Errorf("racing claim %d: got %v, want nil or ErrClaimHeld", i, err)
		}
	}
	if holder == "" {
		t.Fatal("no racing claim succeeded")
	}
}
