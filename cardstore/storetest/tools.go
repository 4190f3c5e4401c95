package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/subjects"
)

// ToolStore is a store that checks the tool-scoped writes of workers
// itself: natsstore.ToolStore's methods on top of cardstore.Store
// (cardstore/boltstore and cardstore/jsstore implement it). It is
// declared here, where it is used, so that the suite does not import the
// NATS server.
type ToolStore interface {
	cardstore.Store
	ClaimTool(ctx context.Context, req cardstore.ClaimRequest, tool string) (*cardstore.Claim, error)
	StartCallTool(ctx context.Context, req cardstore.StartCallRequest, tool string) (*cardstore.StartCallResult, error)
	ReleaseTool(ctx context.Context, projectID, key, holder, tool string) error
	PutToolResult(ctx context.Context, tool, holder string, token uint64, cards ...*card.Card) error
}

// RunTools runs the conformance suite of the tool-scoped writes: the rules
// of docs/security.md, "Results only from the tool that ran", with the
// errors boltstore gives (ErrForbidden for another tool's call, claim or
// result, ErrClaimLost for a claim taken over, ErrClaimHeld). newStore
// must return a fresh, empty store, as for Run; subtests run in
// parallel.
func RunTools(t *testing.T, newStore func(t *testing.T) ToolStore) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s ToolStore)
	}{
		{"ClaimTool", testClaimTool},
		{"ReleaseTool", testReleaseTool},
		{"PutToolResult", testPutToolResult},
		{"PutToolResultTakenOver", testPutToolResultTakenOver},
		{"StartCallTool", testStartCallTool},
		{"TakeOverRacesPut", testTakeOverRacesPut},
		{"LaterCallCard", testLaterCallCard},
		{"SlashIDs", testSlashIDs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

// The two tools of the suite: toolA is ToolCallCard's, toolB another.
const (
	toolBName = "calc.add"
	lease     = time.Minute
)

var (
	toolA = subjects.ToolToken(toolName)
	toolB = subjects.ToolToken(toolBName)
)

// callOf returns a new tool.call card of (turn, call) calling the tool
// named toolName.
func callOf(p, turn, call, toolName string) *card.Card {
	c := ToolCallCard(p, turn, call)
	var tc card.ToolCallContent
	_ = json.Unmarshal(c.Content, &tc)
	tc.ToolName = toolName
	c.Content, _ = json.Marshal(tc)
	return c
}

// resultOf returns a new tool.result card of (turn, call) naming the tool
// toolName in metadata.function_name.
func resultOf(p, turn, call, toolName string) *card.Card {
	c := ToolResultCard(p, turn, call, card.StatusSuccess)
	c.Metadata.FunctionName = toolName
	return c
}

// claimTool claims (turn, call) for tool and fails the test on error.
func claimTool(t *testing.T, s ToolStore, p, turn, call, holder, tool string, l time.Duration) *cardstore.Claim {
	t.Helper()
	c, err := s.ClaimTool(t.Context(), cardstore.ClaimRequest{ProjectID: p, Key: cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String(), Holder: holder, Lease: l}, tool)
	if err != nil {
		t.Fatalf("claim %s/%s by %s for tool %s: %v", turn, call, holder, tool, err)
	}
	return c
}

// wantHeldBy fails unless the claim on (turn, call) is held by holder with
// token.
func wantHeldBy(t *testing.T, what string, s ToolStore, p, turn, call, holder string, token uint64) {
	t.Helper()
	c, err := s.GetClaim(t.Context(), p, cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String())
	if err != nil {
		t.Fatalf("%s: claim of %s/%s: %v, want it held by %s", what, turn, call, err, holder)
	}
	if c.Holder != holder || c.Token != token {
		t.Fatalf("%s: claim of %s/%s = %+v, want holder %s with token %d", what, turn, call, c, holder, token)
	}
}

// wantNoClaim fails unless (turn, call) has no claim.
func wantNoClaim(t *testing.T, what string, s ToolStore, p, turn, call string) {
	t.Helper()
	if c, err := s.GetClaim(t.Context(), p, cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String()); !errors.Is(err, cardstore.ErrNotFound) {
		t.Fatalf("%s: claim of %s/%s = %+v, %v; want none (ErrNotFound)", what, turn, call, c, err)
	}
}

// awaitExpired waits until the claim on (turn, call) has lapsed by the
// store's clock.
func awaitExpired(t *testing.T, s ToolStore, p, turn, call string) {
	t.Helper()
	deadline := time.Now().Add(pollDeadline)
	for {
		c, err := s.GetClaim(t.Context(), p, cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String())
		if err != nil {
			t.Fatalf("claim of %s/%s while waiting for it to lapse: %v", turn, call, err)
		}
		if c.Expired {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim of %s/%s never lapsed within %v", turn, call, pollDeadline)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testClaimTool: a worker claims only calls of its tool, renews only the
// claims it took for its tool, and another live holder keeps its claim.
func testClaimTool(t *testing.T, s ToolStore) {
	const p = "proj-claimtool"
	ctx := t.Context()
	mustPut(t, s, callOf(p, "t1", "c1", toolName), callOf(p, "t2", "c2", toolBName), callOf(p, "t3/x", "c3", toolBName))
	claimTool(t, s, p, "t5", "c5", "w5", toolA, lease) // no card: any tool may claim
	if _, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: cardstore.CallKey{AgentTurnID: "t6", ToolCallID: "c6"}.String(), Holder: "w6", Lease: lease}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name             string
		turn, call, tool string
		holder           string
		core             bool // Claim, not ClaimTool
		err              error
		heldBy           string // the claim's holder afterwards ("": none)
		token            uint64
	}{
		{"own tool's call", "t1", "c1", toolA, "w1", false, nil, "w1", 1},
		{"another tool's call", "t2", "c2", toolA, "w2", false, cardstore.ErrForbidden, "", 0},
		{"another tool's call, ids with slashes", "t3/x", "c3", toolA, "w3", false, cardstore.ErrForbidden, "", 0},
		{"call without a card", "t4", "c4", toolB, "w4", false, nil, "w4", 1},
		{"renewal for another tool", "t5", "c5", toolB, "w5", false, cardstore.ErrForbidden, "w5", 1},
		{"renewal for the same tool", "t5", "c5", toolA, "w5", false, nil, "w5", 1},
		{"renewal of a tool's claim by the core", "t5", "c5", "", "w5", true, cardstore.ErrForbidden, "w5", 1},
		{"renewal of the core's claim by a tool", "t6", "c6", toolA, "w6", false, cardstore.ErrForbidden, "w6", 1},
		{"another live holder", "t5", "c5", toolA, "w7", false, cardstore.ErrClaimHeld, "w5", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := cardstore.ClaimRequest{ProjectID: p, Key: cardstore.CallKey{AgentTurnID: tc.turn, ToolCallID: tc.call}.String(), Holder: tc.holder, Lease: lease}
			var c *cardstore.Claim
			var err error
			if tc.core {
				c, err = s.Claim(ctx, req)
			} else {
				c, err = s.ClaimTool(ctx, req, tc.tool)
			}
			switch {
			case tc.err != nil:
				wantErr(t, "claim", err, tc.err)
				var held *cardstore.ClaimHeldError
				if errors.As(err, &held) && held.Holder != tc.heldBy {
					t.Errorf("ClaimHeldError names holder %q, want %q (as given, without the tool)", held.Holder, tc.heldBy)
				}
			case err != nil:
				t.Fatalf("claim: %v", err)
			case c.Holder != tc.holder || c.Token != tc.token || c.TakenOver:
				t.Fatalf("claim = %+v, want %s's with token %d", c, tc.holder, tc.token)
			}
			if tc.heldBy == "" {
				wantNoClaim(t, "after the claim", s, p, tc.turn, tc.call)
				return
			}
			wantHeldBy(t, "after the claim", s, p, tc.turn, tc.call, tc.heldBy, tc.token)
		})
	}
}

// testReleaseTool: a worker releases only the claims it holds for its
// tool.
func testReleaseTool(t *testing.T, s ToolStore) {
	const p = "proj-releasetool"
	ctx := t.Context()
	claimTool(t, s, p, "t1", "c1", "w1", toolA, lease)
	if _, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: cardstore.CallKey{AgentTurnID: "t2", ToolCallID: "c2"}.String(), Holder: "core", Lease: lease}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, turn, call, holder, tool string
		err                            error
		heldBy                         string // the claim's holder afterwards ("": none)
	}{
		{"another tool's claim", "t1", "c1", "w1", toolB, cardstore.ErrForbidden, "w1"},
		{"the core's claim", "t2", "c2", "core", toolA, cardstore.ErrForbidden, "core"},
		{"another holder's claim", "t1", "c1", "w2", toolA, cardstore.ErrClaimLost, "w1"},
		{"no claim", "t3", "c3", "w1", toolA, cardstore.ErrClaimLost, ""},
		{"own claim", "t1", "c1", "w1", toolA, nil, ""},
		{"own claim again", "t1", "c1", "w1", toolA, cardstore.ErrClaimLost, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.ReleaseTool(ctx, p, cardstore.CallKey{AgentTurnID: tc.turn, ToolCallID: tc.call}.String(), tc.holder, tc.tool)
			if tc.err != nil {
				wantErr(t, "release", err, tc.err)
			} else if err != nil {
				t.Fatalf("release: %v", err)
			}
			if tc.heldBy == "" {
				wantNoClaim(t, "after the release", s, p, tc.turn, tc.call)
				return
			}
			wantHeldBy(t, "after the release", s, p, tc.turn, tc.call, tc.heldBy, 1)
		})
	}
	// A claim released by its holder starts again at token 1 for the
	// next one, as after Release.
	if c := claimTool(t, s, p, "t1", "c1", "w3", toolA, lease); c.Token != 1 || c.TakenOver {
		t.Errorf("claim after release = %+v, want token 1, no take-over", c)
	}
}
