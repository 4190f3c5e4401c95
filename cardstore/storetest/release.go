package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// testResultReleasesClaim: putting a call's tool.result ends the claim on
// its CallKey in the same write (the worker's claim never outlives the
// result), the fencing token of a later claim of the key is still larger
// than every earlier one, and claims of other calls are untouched.
func testResultReleasesClaim(t *testing.T, s cardstore.Store) {
	const p = "proj-release"
	ctx := t.Context()
	key := cardstore.CallKey{AgentTurnID: "turn-1", ToolCallID: "call-1"}.String()
	other := cardstore.CallKey{AgentTurnID: "turn-1", ToolCallID: "call-2"}.String()
	claim := func(k, holder string) *cardstore.Claim {
		t.Helper()
		c, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: k, Holder: holder, Lease: time.Minute})
		if err != nil {
			t.Fatalf("claim %s by %s: %v", k, holder, err)
		}
		return c
	}
	first := claim(key, "w1")
	claim(other, "w1")
	if err := s.Put(ctx, ToolResultCard(p, "turn-1", "call-1", card.StatusSuccess)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetClaim(ctx, p, key); !errors.Is(err, cardstore.ErrNotFound) {
		t.Fatalf("claim after the result was put: %v, want ErrNotFound (released with the result)", err)
	}
	wantErr(t, "release of a claim the result released", s.Release(ctx, p, key, "w1"), cardstore.ErrClaimLost)
	if _, err := s.GetClaim(ctx, p, other); err != nil {
		t.Fatalf("claim of another call after the result: %v, want it untouched", err)
	}
	again := claim(key, "w2")
	if again.Token <= first.Token || again.TakenOver {
		t.Fatalf("claim after release = %+v, want a token above %d and no take-over", again, first.Token)
	}
	// A result put without any claim (a PMO cancel, a foreign worker)
	// releases nothing and fails nothing.
	if err := s.Put(ctx, ToolResultCard(p, "turn-2", "call-1", card.StatusSuccess)); err != nil {
		t.Fatal(err)
	}
}
