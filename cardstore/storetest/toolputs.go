package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// testPutToolResult: a worker writes a call's result only for its tool's
// calls and under the call's claim, held for its tool with the fencing
// token it names; the result ends the claim. A refused result is not
// stored and leaves the claim as it was.
func testPutToolResult(t *testing.T, s ToolStore) {
	const p = "proj-puttool"
	ctx := t.Context()
	mustPut(t, s, callOf(p, "t1", "c1", toolName), callOf(p, "t2", "c2", toolBName))
	own := claimTool(t, s, p, "t1", "c1", "w1", toolA, lease)
	claimTool(t, s, p, "t3", "c3", "w3", toolB, lease) // no card: toolB's claim
	core, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: cardstore.CallKey{AgentTurnID: "t4", ToolCallID: "c4"}.String(), Holder: "core", Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	lapsed := claimTool(t, s, p, "t5", "c5", "w5", toolA, shortLease)
	answered := resultOf(p, "t6", "c6", toolName)
	mustPut(t, s, answered)
	tests := []struct {
		name       string
		result     *card.Card
		holder     string
		token      uint64
		err        error
		heldBy     string // the claim's holder afterwards ("": none)
		heldToken  uint64
		wantStored bool
	}{
		{"function_name of another tool", resultOf(p, "t1", "c1", toolBName), "w1", own.Token, cardstore.ErrForbidden, "w1", own.Token, false},
		{"no function_name", resultOf(p, "t1", "c1", ""), "w1", own.Token, cardstore.ErrForbidden, "w1", own.Token, false},
		{"call card of another tool", resultOf(p, "t2", "c2", toolName), "w1", 1, cardstore.ErrForbidden, "", 0, false},
		{"no claim given", resultOf(p, "t1", "c1", toolName), "", 0, cardstore.ErrForbidden, "w1", own.Token, false},
		{"call nobody claimed", resultOf(p, "t7", "c7", toolName), "w1", 1, cardstore.ErrForbidden, "", 0, false},
		{"claim of another tool", resultOf(p, "t3", "c3", toolName), "w3", 1, cardstore.ErrForbidden, "w3", 1, false},
		{"claim of the core", resultOf(p, "t4", "c4", toolName), "core", core.Token, cardstore.ErrForbidden, "core", core.Token, false},
		{"claim of another holder", resultOf(p, "t1", "c1", toolName), "w2", own.Token, cardstore.ErrClaimLost, "w1", own.Token, false},
		{"stale fencing token", resultOf(p, "t1", "c1", toolName), "w1", own.Token + 1, cardstore.ErrClaimLost, "w1", own.Token, false},
		{"under its claim", resultOf(p, "t1", "c1", toolName), "w1", own.Token, nil, "", 0, true},
		{"a second result, under no claim", resultOf(p, "t6", "c6", toolName), "", 0, cardstore.ErrResultExists, "", 0, false},
		{"the same result again, under no claim", answered, "", 0, nil, "", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.PutToolResult(ctx, toolA, tc.holder, tc.token, tc.result)
			if tc.err != nil {
				wantErr(t, "put_result", err, tc.err)
			} else if err != nil {
				t.Fatalf("put_result: %v", err)
			}
			if tc.wantStored {
				got, err := s.Get(ctx, p, tc.result.CardID)
				if err != nil {
					t.Fatalf("result after the put: %v", err)
				}
				sameCard(t, "result after the put", got, tc.result)
			} else {
				wantNotStored(t, "refused result", s, tc.result)
			}
			turn, call := tc.result.Metadata.AgentTurnID, tc.result.ToolCallID
			if tc.heldBy == "" {
				wantNoClaim(t, "after the put", s, p, turn, call)
				return
			}
			wantHeldBy(t, "after the put", s, p, turn, call, tc.heldBy, tc.heldToken)
		})
	}
	// The next claim of an answered call gets a larger token.
	if c := claimTool(t, s, p, "t1", "c1", "w9", toolA, lease); c.Token <= own.Token || c.TakenOver {
		t.Errorf("claim after the result = %+v, want a token above %d, no take-over", c, own.Token)
	}
	// A lapsed lease nobody took over is still its holder's.
	awaitExpired(t, s, p, "t5", "c5")
	if err := s.PutToolResult(ctx, toolA, "w5", lapsed.Token, resultOf(p, "t5", "c5", toolName)); err != nil {
		t.Fatalf("put_result under a lapsed claim nobody took over: %v", err)
	}
	wantNoClaim(t, "after the put under a lapsed claim", s, p, "t5", "c5")
}

// testPutToolResultTakenOver: once another worker of the tool took the
// call's claim over, the old holder's result is refused (ErrClaimLost)
// and the new holder's accepted: the fencing token decides.
func testPutToolResultTakenOver(t *testing.T, s ToolStore) {
	const p = "proj-puttool-takeover"
	ctx := t.Context()
	mustPut(t, s, callOf(p, "t1", "c1", toolName))
	old := claimTool(t, s, p, "t1", "c1", "w1", toolA, shortLease)
	awaitExpired(t, s, p, "t1", "c1")
	c := claimTool(t, s, p, "t1", "c1", "w2", toolA, lease)
	if !c.TakenOver || c.PreviousHolder != "w1" || c.Token != old.Token+1 {
		t.Fatalf("take-over = %+v, want w2 taking over from w1 with token %d", c, old.Token+1)
	}
	late := resultOf(p, "t1", "c1", toolName)
	wantErr(t, "the old holder's result", s.PutToolResult(ctx, toolA, "w1", old.Token, late), cardstore.ErrClaimLost)
	wantNotStored(t, "the old holder's result", s, late)
	wantHeldBy(t, "after the old holder's result", s, p, "t1", "c1", "w2", c.Token)
	wantErr(t, "release by the old holder", s.ReleaseTool(ctx, p, cardstore.CallKey{AgentTurnID: "t1", ToolCallID: "c1"}.String(), "w1", toolA), cardstore.ErrClaimLost)
	if err := s.PutToolResult(ctx, toolA, "w2", c.Token, resultOf(p, "t1", "c1", toolName)); err != nil {
		t.Fatalf("the new holder's result: %v", err)
	}
	wantNoClaim(t, "after the new holder's result", s, p, "t1", "c1")
}

// testStartCallTool: a worker starts only calls of its tool, with a claim
// taken for its tool; a call that has a result returns it whatever the
// claim rules say.
func testStartCallTool(t *testing.T, s ToolStore) {
	const p = "proj-starttool"
	ctx := t.Context()
	own, other := callOf(p, "t1", "c1", toolName), callOf(p, "t2", "c2", toolBName)
	otherDone := callOf(p, "t3", "c3", toolBName)
	mustPut(t, s, own, other, otherDone)
	res3 := resultOf(p, "t3", "c3", toolBName)
	mustPut(t, s, res3)
	claimTool(t, s, p, "t4", "c4", "w4", toolB, lease) // no card: toolB's claim
	claimTool(t, s, p, "t5", "c5", "w5", toolB, lease)
	res5 := resultOf(p, "t5", "c5", toolBName)
	mustPut(t, s, res5)                                // ends w5's claim
	claimTool(t, s, p, "t5", "c5", "w5", toolB, lease) // a claim again, after the result
	claimTool(t, s, p, "t6", "c6", "w6", toolA, lease)
	start := func(turn, call, cardID, holder string) (*cardstore.StartCallResult, error) {
		return s.StartCallTool(ctx, cardstore.StartCallRequest{ProjectID: p, AgentTurnID: turn, ToolCallID: call, ToolCallCardID: cardID, Holder: holder, Lease: lease}, toolA)
	}

	res, err := start("t1", "c1", own.CardID, "w1")
	wantClaim(t, "start of own tool's call", res, err, p, "t1", "c1", "w1", 1, "")
	sameCard(t, "call card of the start", res.CallCard, own)
	wantErr(t, "release of the started call's claim by another tool",
		s.ReleaseTool(ctx, p, cardstore.CallKey{AgentTurnID: "t1", ToolCallID: "c1"}.String(), "w1", toolB), cardstore.ErrForbidden)
	if err := s.PutToolResult(ctx, toolA, "w1", res.Claim.Token, resultOf(p, "t1", "c1", toolName)); err != nil {
		t.Fatalf("result under the started call's claim: %v", err)
	}

	tests := []struct {
		name, turn, call, holder string
		err                      error
		result                   *card.Card // the result returned, when err is nil
		heldBy                   string     // the claim's holder afterwards ("": none)
	}{
		{"another tool's call", "t2", "c2", "w2", cardstore.ErrForbidden, nil, ""},
		{"another tool's call that has a result", "t3", "c3", "w3", nil, res3, ""},
		{"holder's claim for another tool", "t4", "c4", "w4", cardstore.ErrForbidden, nil, "w4"},
		{"holder's claim for another tool, with a result", "t5", "c5", "w5", nil, res5, "w5"},
		{"another live holder", "t6", "c6", "w7", cardstore.ErrClaimHeld, nil, "w6"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := start(tc.turn, tc.call, "", tc.holder)
			if tc.err != nil {
				wantErr(t, "start", err, tc.err)
			} else {
				wantResult(t, "start", res, err, tc.result)
			}
			if tc.heldBy == "" {
				wantNoClaim(t, "after the start", s, p, tc.turn, tc.call)
				return
			}
			c, err := s.GetClaim(ctx, p, cardstore.CallKey{AgentTurnID: tc.turn, ToolCallID: tc.call}.String())
			if err != nil || c.Holder != tc.heldBy {
				t.Fatalf("claim after the start = %+v, %v; want it held by %s", c, err, tc.heldBy)
			}
		})
	}
}

// testTakeOverRacesPut races, on many calls at once, the old holder's
// result (written after its lease lapsed) against another worker's
// take-over of the call. Either may win, but never both: a result stored
// means the take-over came after it (the call was answered: no take-over
// of the old holder, or the result returned), and a take-over means the
// old holder's result was refused with ErrClaimLost. A store that checks
// the claim before the write, not in it, lets both win.
func testTakeOverRacesPut(t *testing.T, s ToolStore) {
	const p = "proj-race"
	const calls = 16
	ctx := t.Context()
	for _, viaStart := range []bool{false, true} {
		t.Run(fmt.Sprintf("start=%v", viaStart), func(t *testing.T) {
			turn := fmt.Sprintf("turn-%v", viaStart)
			old := make([]*cardstore.Claim, calls)
			for i := range calls {
				call := fmt.Sprintf("c%d", i)
				mustPut(t, s, callOf(p, turn, call, toolName))
				old[i] = claimTool(t, s, p, turn, call, "old", toolA, shortLease)
			}
			for i := range calls {
				awaitExpired(t, s, p, turn, fmt.Sprintf("c%d", i))
			}
			putErr := make([]error, calls)
			results := make([]*card.Card, calls)
			taken := make([]*cardstore.Claim, calls)
			answered := make([]bool, calls)
			var wg sync.WaitGroup
			for i := range calls {
				call := fmt.Sprintf("c%d", i)
				results[i] = resultOf(p, turn, call, toolName)
				wg.Add(2)
				go func() {
					defer wg.Done()
					putErr[i] = s.PutToolResult(ctx, toolA, "old", old[i].Token, results[i])
				}()
				go func() {
					defer wg.Done()
					req := cardstore.ClaimRequest{ProjectID: p, Key: cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String(), Holder: "new", Lease: lease}
					if !viaStart {
						var err error
						if taken[i], err = s.ClaimTool(ctx, req, toolA); err != nil {
							t.Errorf("take-over of %s: %v", call, err)
						}
						return
					}
					res, err := s.StartCallTool(ctx, cardstore.StartCallRequest{ProjectID: p, AgentTurnID: turn, ToolCallID: call, Holder: "new", Lease: lease}, toolA)
					if err != nil {
						t.Errorf("start of %s: %v", call, err)
						return
					}
					taken[i], answered[i] = res.Claim, res.Result != nil
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			won := 0
			for i := range calls {
				call := fmt.Sprintf("c%d", i)
				tookOver := taken[i] != nil && taken[i].TakenOver
				switch {
				case putErr[i] == nil && tookOver:
					t.Errorf("%s: the old holder's result was stored and the new holder took the claim over from it (token %d): both won", call, taken[i].Token)
				case putErr[i] == nil:
					won++
					got, err := s.FindToolResult(ctx, p, turn, call)
					if err != nil || got.CardID != results[i].CardID {
						t.Errorf("%s: result accepted, but the call's result is %v, %v", call, got, err)
					}
					if viaStart && !answered[i] {
						t.Errorf("%s: result accepted, but the start that followed got a claim (%+v), not the result", call, taken[i])
					}
				case errors.Is(putErr[i], cardstore.ErrClaimLost):
					if !tookOver {
						t.Errorf("%s: result refused (%v) but the new holder's claim is %+v, not a take-over", call, putErr[i], taken[i])
					}
					wantNotStored(t, call, s, results[i])
					wantHeldBy(t, call, s, p, turn, call, "new", old[i].Token+1)
				default:
					t.Errorf("%s: old holder's result: %v, want nil or ErrClaimLost", call, putErr[i])
				}
			}
			t.Logf("%d of %d races won by the old holder's result", won, calls)
		})
	}
}

// testLaterCallCard: a second tool.call card of a call, written after the
// first and naming another tool (as a worker of that tool could, with a
// plain put, to take the call over), does not move the call to that tool:
// the tool checks read the call's first card, the one its agent wrote
// before publishing the command. The first tool keeps the call.
func testLaterCallCard(t *testing.T, s ToolStore) {
	const p = "proj-latercard"
	ctx := t.Context()
	first := callOf(p, "t1", "c1", toolBName) // the agent's: tool B
	mustPut(t, s, first)
	mustPut(t, s, callOf(p, "t1", "c1", toolName)) // later: tool A
	start := func(tool, holder string) (*cardstore.StartCallResult, error) {
		return s.StartCallTool(ctx, cardstore.StartCallRequest{ProjectID: p, AgentTurnID: "t1", ToolCallID: "c1", Holder: holder, Lease: lease}, tool)
	}
	_, err := start(toolA, "wa")
	wantErr(t, "start by the tool of the later card", err, cardstore.ErrForbidden)
	_, err = s.ClaimTool(ctx, cardstore.ClaimRequest{ProjectID: p, Key: cardstore.CallKey{AgentTurnID: "t1", ToolCallID: "c1"}.String(), Holder: "wa", Lease: lease}, toolA)
	wantErr(t, "claim by the tool of the later card", err, cardstore.ErrForbidden)
	res, err := start(toolB, "wb")
	wantClaim(t, "start by the tool of the first card", res, err, p, "t1", "c1", "wb", 1, "")
	wantErr(t, "result of the later card's tool",
		s.PutToolResult(ctx, toolA, "wb", res.Claim.Token, resultOf(p, "t1", "c1", toolName)), cardstore.ErrForbidden)
	if err := s.PutToolResult(ctx, toolB, "wb", res.Claim.Token, resultOf(p, "t1", "c1", toolBName)); err != nil {
		t.Fatalf("result of the first card's tool: %v", err)
	}
}

// testSlashIDs: ids may hold '/'. Turn "t/x" with call "y" and turn "t"
// with call "x/y" are two calls with two claim keys (cardstore.CallKey
// escapes the turn's '/'), each started and answered by its own tool
// only; the plain join "toolcall/t/x/y" names the second call alone, so a
// worker of the first call's tool may not claim it.
func testSlashIDs(t *testing.T, s ToolStore) {
	const p = "proj-slash"
	ctx := t.Context()
	mustPut(t, s, callOf(p, "t", "x/y", toolBName), callOf(p, "t/x", "y", toolName))
	a := cardstore.CallKey{AgentTurnID: "t/x", ToolCallID: "y"}
	b := cardstore.CallKey{AgentTurnID: "t", ToolCallID: "x/y"}
	if a.String() == b.String() {
		t.Fatalf("calls %+v and %+v share the key %q", a, b, a.String())
	}
	_, err := s.ClaimTool(ctx, cardstore.ClaimRequest{ProjectID: p, Key: "toolcall/t/x/y", Holder: "wa", Lease: lease}, toolA)
	wantErr(t, "claim of the plain join (tool B's call) by tool A", err, cardstore.ErrForbidden)
	_, err = s.StartCallTool(ctx, cardstore.StartCallRequest{ProjectID: p, AgentTurnID: b.AgentTurnID, ToolCallID: b.ToolCallID, Holder: "wa", Lease: lease}, toolA)
	wantErr(t, "start of tool B's call by tool A", err, cardstore.ErrForbidden)
	wantErr(t, "result of tool B's call by tool A",
		s.PutToolResult(ctx, toolA, "wa", 1, resultOf(p, b.AgentTurnID, b.ToolCallID, toolName)), cardstore.ErrForbidden)

	ra, err := s.StartCallTool(ctx, cardstore.StartCallRequest{ProjectID: p, AgentTurnID: a.AgentTurnID, ToolCallID: a.ToolCallID, Holder: "wa", Lease: lease}, toolA)
	wantClaim(t, "start of tool A's call", ra, err, p, a.AgentTurnID, a.ToolCallID, "wa", 1, "")
	rb, err := s.StartCallTool(ctx, cardstore.StartCallRequest{ProjectID: p, AgentTurnID: b.AgentTurnID, ToolCallID: b.ToolCallID, Holder: "wb", Lease: lease}, toolB)
	wantClaim(t, "start of tool B's call while A's is held", rb, err, p, b.AgentTurnID, b.ToolCallID, "wb", 1, "")
	if err := s.PutToolResult(ctx, toolA, "wa", ra.Claim.Token, resultOf(p, a.AgentTurnID, a.ToolCallID, toolName)); err != nil {
		t.Fatalf("result of tool A's call: %v", err)
	}
	wantNoClaim(t, "tool A's call after its result", s, p, a.AgentTurnID, a.ToolCallID)
	wantHeldBy(t, "tool B's call after A's result", s, p, b.AgentTurnID, b.ToolCallID, "wb", 1)
}
