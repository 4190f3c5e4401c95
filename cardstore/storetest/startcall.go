package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// toolName is the tool of ToolCallCard and ToolResultCard.
const toolName = "weather.get"

// workerCtx is the context a worker makes its store calls with: a remote
// store (natsstore) sends StartCall on the tool's subject; a local store
// ignores the tool.
func workerCtx(t *testing.T) context.Context { return cardstore.WithTool(t.Context(), toolName) }

// startCall is one worker's StartCall of (turn, call) in project p.
func startCall(t *testing.T, s cardstore.Store, p, turn, call, cardID, holder string, lease time.Duration) (*cardstore.StartCallResult, error) {
	t.Helper()
	return s.StartCall(workerCtx(t), cardstore.StartCallRequest{
		ProjectID: p, AgentTurnID: turn, ToolCallID: call, ToolCallCardID: cardID, Holder: holder, Lease: lease,
	})
}

// wantClaim fails unless res holds a claim of (turn, call) by holder with
// token, taken over from prev when prev is not empty, and no result.
func wantClaim(t *testing.T, what string, res *cardstore.StartCallResult, err error, p, turn, call, holder string, token uint64, prev string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	c := res.Claim
	switch {
	case res.Result != nil:
		t.Fatalf("%s: got result %s, want a claim", what, res.Result.CardID)
	case c == nil:
		t.Fatalf("%s: got no claim", what)
	case c.ProjectID != p || c.Key != cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String() || c.Holder != holder || c.Token != token || c.ExpiresAt.IsZero():
		t.Fatalf("%s: claim = %+v, want %s's claim of %q with token %d", what, c, holder, cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String(), token)
	case c.TakenOver != (prev != "") || c.PreviousHolder != prev:
		t.Fatalf("%s: claim = %+v, want taken over %v from %q", what, c, prev != "", prev)
	case c.Expired:
		t.Fatalf("%s: claim = %+v has Expired set (only GetClaim sets it)", what, c)
	}
}

// wantResult fails unless res holds the result want and nothing else.
func wantResult(t *testing.T, what string, res *cardstore.StartCallResult, err error, want *card.Card) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if res.Claim != nil || res.CallCard != nil {
		t.Fatalf("%s: got claim %+v and call card %v with the result, want the result alone", what, res.Claim, res.CallCard != nil)
	}
	sameCard(t, what, res.Result, want)
}

// testStartCall: a worker's start of a call returns the call's result
// when it has one (and takes no claim), else the call's claim under the
// rules of Claim and the named card.
func testStartCall(t *testing.T, s cardstore.Store) {
	const p = "proj-start"
	const lease = time.Minute
	tests := []struct {
		name string
		run  func(t *testing.T, turn, call string)
	}{
		{"fresh call", func(t *testing.T, turn, call string) {
			cc := ToolCallCard(p, turn, call)
			mustPut(t, s, cc)
			res, err := startCall(t, s, p, turn, call, cc.CardID, "w1", lease)
			wantClaim(t, "start", res, err, p, turn, call, "w1", 1, "")
			sameCard(t, "call card", res.CallCard, cc)
			got, err := s.GetClaim(t.Context(), p, cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String())
			if err != nil || got.Token != 1 || got.Expired || !got.ExpiresAt.Equal(res.Claim.ExpiresAt) {
				t.Fatalf("get claim after start = %+v, %v; want the claim start took", got, err)
			}
		}},
		{"missing call card", func(t *testing.T, turn, call string) {
			other := ToolCallCard(p+"-other", turn, call) // another project's card is no card here
			mustPut(t, s, other)
			for i, id := range []string{card.NewID(), other.CardID, ""} {
				res, err := startCall(t, s, p, turn, call, id, "w1", lease)
				wantClaim(t, fmt.Sprintf("start %d naming %q", i, id), res, err, p, turn, call, "w1", 1, "")
				if res.CallCard != nil {
					t.Fatalf("start naming %q: got call card %s, want none", id, res.CallCard.CardID)
				}
			}
		}},
		{"result exists", func(t *testing.T, turn, call string) {
			cc, rc := ToolCallCard(p, turn, call), ToolResultCard(p, turn, call, card.StatusSuccess)
			mustPut(t, s, cc, rc)
			for i := range 2 {
				res, err := startCall(t, s, p, turn, call, cc.CardID, fmt.Sprintf("w%d", i), lease)
				wantResult(t, fmt.Sprintf("start %d of an answered call", i), res, err, rc)
			}
			_, err := s.GetClaim(t.Context(), p, cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String())
			wantErr(t, "get claim of an answered call after start", err, cardstore.ErrNotFound)
		}},
		{"result exists while the claim is held", func(t *testing.T, turn, call string) {
			rc := ToolResultCard(p, turn, call, card.StatusSuccess)
			mustPut(t, s, rc)
			if _, err := s.Claim(t.Context(), cardstore.ClaimRequest{ProjectID: p, Key: cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String(), Holder: "other", Lease: lease}); err != nil {
				t.Fatal(err)
			}
			res, err := startCall(t, s, p, turn, call, "", "w1", lease)
			wantResult(t, "start of an answered call someone holds", res, err, rc)
		}},
		{"same holder renews", func(t *testing.T, turn, call string) {
			first, err := startCall(t, s, p, turn, call, "", "w1", lease)
			wantClaim(t, "first start", first, err, p, turn, call, "w1", 1, "")
			again, err := startCall(t, s, p, turn, call, "", "w1", lease)
			wantClaim(t, "second start by the holder", again, err, p, turn, call, "w1", 1, "")
			if again.Claim.ExpiresAt.Before(first.Claim.ExpiresAt) {
				t.Fatalf("renewal moved the lease back: %v before %v", again.Claim.ExpiresAt, first.Claim.ExpiresAt)
			}
		}},
		{"another live holder", func(t *testing.T, turn, call string) {
			res, err := startCall(t, s, p, turn, call, "", "w1", lease)
			wantClaim(t, "first start", res, err, p, turn, call, "w1", 1, "")
			_, err = startCall(t, s, p, turn, call, "", "w2", lease)
			wantErr(t, "start by another holder", err, cardstore.ErrClaimHeld)
			var held *cardstore.ClaimHeldError
			if !errors.As(err, &held) || held.Holder != "w1" || held.ExpiresAt.IsZero() {
				t.Fatalf("start by another holder: %v, want a *ClaimHeldError naming w1 and its expiry", err)
			}
		}},
		{"expired holder is taken over", func(t *testing.T, turn, call string) {
			cc := ToolCallCard(p, turn, call)
			mustPut(t, s, cc)
			res, err := startCall(t, s, p, turn, call, cc.CardID, "w1", shortLease)
			wantClaim(t, "first start", res, err, p, turn, call, "w1", 1, "")
			deadline := time.Now().Add(pollDeadline)
			for {
				res, err = startCall(t, s, p, turn, call, cc.CardID, "w2", lease)
				if !errors.Is(err, cardstore.ErrClaimHeld) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("lease of %v never expired within %v: %v", shortLease, pollDeadline, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			wantClaim(t, "start after the lease lapsed", res, err, p, turn, call, "w2", 2, "w1")
			sameCard(t, "call card of the take-over", res.CallCard, cc)
		}},
		{"result put after the claim", func(t *testing.T, turn, call string) {
			cc := ToolCallCard(p, turn, call)
			mustPut(t, s, cc)
			res, err := startCall(t, s, p, turn, call, cc.CardID, "w1", lease)
			wantClaim(t, "start", res, err, p, turn, call, "w1", 1, "")
			rc := ToolResultCard(p, turn, call, card.StatusSuccess)
			if err := s.Put(workerCtx(t), rc); err != nil { // the worker's result, under its claim
				t.Fatalf("result under the claim: %v", err)
			}
			for _, holder := range []string{"w2", "w1"} {
				res, err := startCall(t, s, p, turn, call, cc.CardID, holder, lease)
				wantResult(t, "start by "+holder+" after the result", res, err, rc)
			}
			_, err = s.GetClaim(t.Context(), p, cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String())
			wantErr(t, "get claim after the result", err, cardstore.ErrNotFound)
		}},
		{"result put while starting", func(t *testing.T, turn, call string) {
			// Whichever of the result's Put and a StartCall comes first,
			// the call ends with its result and no live claim: a claim
			// taken before the result is ended by it, and none is taken
			// after it. (Look-then-claim would leave a claim behind,
			// whose holder runs the call again.)
			for i := range 20 {
				turn := fmt.Sprintf("%s-%d", turn, i)
				rc := ToolResultCard(p, turn, call, card.StatusSuccess)
				var res *cardstore.StartCallResult
				var putErr, startErr error
				var wg sync.WaitGroup
				wg.Go(func() { putErr = s.Put(t.Context(), rc) })
				wg.Go(func() { res, startErr = startCall(t, s, p, turn, call, "", "w1", lease) })
				wg.Wait()
				if putErr != nil || startErr != nil {
					t.Fatalf("race %d: put %v, start %v", i, putErr, startErr)
				}
				if res.Result != nil {
					wantResult(t, "start that lost the race", res, nil, rc)
				}
				if c, err := s.GetClaim(t.Context(), p, cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String()); !errors.Is(err, cardstore.ErrNotFound) {
					t.Fatalf("race %d: the call has its result and a live claim %+v (%v); want no claim", i, c, err)
				}
			}
		}},
		{"concurrent holders", func(t *testing.T, turn, call string) {
			const racers = 16
			cc := ToolCallCard(p, turn, call)
			mustPut(t, s, cc)
			res := make([]*cardstore.StartCallResult, racers)
			errs := make([]error, racers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range racers {
				wg.Go(func() {
					<-start
					res[i], errs[i] = startCall(t, s, p, turn, call, cc.CardID, fmt.Sprintf("w%d", i), lease)
				})
			}
			close(start)
			wg.Wait()
			winner := -1
			for i, err := range errs {
				switch {
				case err == nil && winner < 0:
					winner = i
					wantClaim(t, "winning start", res[i], err, p, turn, call, fmt.Sprintf("w%d", i), 1, "")
					sameCard(t, "winner's call card", res[i].CallCard, cc)
				case err == nil:
					t.Errorf("two holders started one call: w%d and w%d", winner, i)
				case !errors.Is(err, cardstore.ErrClaimHeld):
					t.Errorf("racing start %d: got %v, want nil or ErrClaimHeld", i, err)
				}
			}
			if winner < 0 {
				t.Fatal("no racing start got the claim")
			}
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, fmt.Sprintf("turn-%d", i), "call-1")
		})
	}
}

// testStartCallInvalid: every malformed StartCall is ErrInvalid, and
// takes no claim.
func testStartCallInvalid(t *testing.T, s cardstore.Store) {
	const p = "proj-start-args"
	long := strings.Repeat("h", cardstore.MaxKeyLen+1)
	ok := cardstore.StartCallRequest{ProjectID: p, AgentTurnID: "turn-1", ToolCallID: "call-1", ToolCallCardID: card.NewID(), Holder: "w1", Lease: time.Minute}
	tests := []struct {
		name   string
		change func(r *cardstore.StartCallRequest)
	}{
		{"no project", func(r *cardstore.StartCallRequest) { r.ProjectID = "" }},
		{"bad project", func(r *cardstore.StartCallRequest) { r.ProjectID = "a b" }},
		{"no turn", func(r *cardstore.StartCallRequest) { r.AgentTurnID = "" }},
		{"no call", func(r *cardstore.StartCallRequest) { r.ToolCallID = "" }},
		{"turn with NUL", func(r *cardstore.StartCallRequest) { r.AgentTurnID = "t\x00" }},
		{"call too long", func(r *cardstore.StartCallRequest) { r.ToolCallID = strings.Repeat("c", card.MaxIDLen+1) }},
		{"claim key too long", func(r *cardstore.StartCallRequest) {
			r.AgentTurnID, r.ToolCallID = strings.Repeat("t", card.MaxIDLen), strings.Repeat("c", card.MaxIDLen)
		}},
		{"bad card id", func(r *cardstore.StartCallRequest) { r.ToolCallCardID = "123" }},
		{"no holder", func(r *cardstore.StartCallRequest) { r.Holder = "" }},
		{"long holder", func(r *cardstore.StartCallRequest) { r.Holder = long }},
		{"short lease", func(r *cardstore.StartCallRequest) { r.Lease = cardstore.MinLease - time.Millisecond }},
		{"long lease", func(r *cardstore.StartCallRequest) { r.Lease = cardstore.MaxLease + time.Second }},
	}
	for _, tc := range tests {
		req := ok
		tc.change(&req)
		res, err := s.StartCall(workerCtx(t), req)
		if !errors.Is(err, cardstore.ErrInvalid) {
			t.Errorf("start with %s: got %+v, %v; want an error wrapping ErrInvalid", tc.name, res, err)
		}
	}
	_, err := s.GetClaim(t.Context(), p, cardstore.CallKey{AgentTurnID: "turn-1", ToolCallID: "call-1"}.String())
	wantErr(t, "get claim after invalid starts", err, cardstore.ErrNotFound)
}
