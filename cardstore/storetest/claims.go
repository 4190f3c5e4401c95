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
	key := cardstore.CallKey{AgentTurnID: "turn-1", ToolCallID: "call-1"}.String()
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

	// The turn summaries counted every card of the concurrent puts once.
	turns := listAllTurns(t, s, cardstore.ListTurnsRequest{ProjectID: p, Limit: 7})
	if len(turns) != writers+1 {
		t.Fatalf("list turns after concurrent puts: %d turns %v, want %d", len(turns), turnIDs(turns), writers+1)
	}
	for _, ti := range turns {
		want := [3]int{perWriter, perWriter / 2, perWriter / 2}
		if ti.AgentTurnID == "turn-race" {
			want = [3]int{1, 0, 1}
		}
		if got := [3]int{ti.Cards, ti.ToolCalls, ti.ToolResults}; got != want {
			t.Errorf("turn %s: cards, tool.call, tool.result = %v, want %v", ti.AgentTurnID, got, want)
		}
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

// testGetClaim checks the read-only claim lookup: it reports the holder
// and whether the lease has lapsed, and never takes, renews or creates a
// claim.
func testGetClaim(t *testing.T, s cardstore.Store) {
	const p = "proj-getclaim"
	ctx := t.Context()
	key := cardstore.CallKey{AgentTurnID: "turn-1", ToolCallID: "call-1"}.String()

	_, err := s.GetClaim(ctx, p, key)
	wantErr(t, "get claim of an unclaimed key", err, cardstore.ErrNotFound)

	held, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: key, Holder: "w1", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GetClaim(ctx, p, key)
	if err != nil {
		t.Fatalf("get claim: %v", err)
	}
	if got.ProjectID != p || got.Key != key || got.Holder != "w1" || got.Token != 1 || !got.ExpiresAt.Equal(held.ExpiresAt) || got.Expired || got.TakenOver || got.PreviousHolder != "" {
		t.Fatalf("get claim = %+v, want w1's live claim with token 1 expiring at %v", got, held.ExpiresAt)
	}
	// Reading took nothing: the claim is still w1's, unchanged.
	_, err = s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: key, Holder: "w2", Lease: time.Minute})
	wantErr(t, "claim by another holder after a get", err, cardstore.ErrClaimHeld)
	again, err := s.GetClaim(ctx, p, key)
	if err != nil || !again.ExpiresAt.Equal(held.ExpiresAt) || again.Holder != "w1" {
		t.Fatalf("second get claim = %+v, %v; want w1's claim, lease not renewed", again, err)
	}

	_, err = s.GetClaim(ctx, p+"-other", key)
	wantErr(t, "get claim of another project's key", err, cardstore.ErrNotFound)
	_, err = s.GetClaim(ctx, p, cardstore.CallKey{AgentTurnID: "turn-1", ToolCallID: "call-2"}.String())
	wantErr(t, "get claim of another call", err, cardstore.ErrNotFound)

	if err := s.Release(ctx, p, key, "w1"); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetClaim(ctx, p, key)
	wantErr(t, "get claim after release", err, cardstore.ErrNotFound)

	// A lapsed lease: GetClaim says so (by the store's clock) and still
	// names the holder; once it does, another holder can take it over.
	lapsing := "k/lapsing"
	if _, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: lapsing, Holder: "w3", Lease: shortLease}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(pollDeadline)
	for {
		c, err := s.GetClaim(ctx, p, lapsing)
		if err != nil {
			t.Fatalf("get claim while waiting for expiry: %v", err)
		}
		if c.Holder != "w3" || c.Token != 1 {
			t.Fatalf("get claim of a lapsing lease = %+v, want w3 with token 1", c)
		}
		if c.Expired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease of %v never reported expired within %v: %+v", shortLease, pollDeadline, c)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: lapsing, Holder: "w4", Lease: time.Minute})
	if err != nil || !c.TakenOver || c.PreviousHolder != "w3" || c.Token != 2 {
		t.Fatalf("claim after GetClaim reported expiry = %+v, %v; want a take-over from w3 with token 2", c, err)
	}
	if c.Expired {
		t.Errorf("Claim set Expired: %+v (only GetClaim sets it)", c)
	}
	got, err = s.GetClaim(ctx, p, lapsing)
	if err != nil || got.Holder != "w4" || got.Token != 2 || got.Expired {
		t.Fatalf("get claim after take-over = %+v, %v; want w4's live claim with token 2", got, err)
	}
}
