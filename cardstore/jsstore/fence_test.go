package jsstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/jsstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/subjects"
)

// fakeClock is a store clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// weather is the tool token of storetest's cards.
var weather = subjects.ToolToken("weather.get")

// resultCard is storetest's tool.result of (turn, call).
func resultCard(p, turn, call string) *card.Card {
	return storetest.ToolResultCard(p, turn, call, card.StatusSuccess)
}

// TestPutToolResultFenced injects a write between PutToolResult's claim
// check and its batch (in the committer, after the plan), from a second
// Store on the same stream, as another CardStore server of a cluster
// would: the batch carries an expectation on the claim record it checked
// (and on the absent result), so it fails, the Put reads again and gets
// the answer it would have got had the write come first.
func TestPutToolResultFenced(t *testing.T) {
	ns := startServer(t, "")
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	stream := newStream()
	s := open(t, connect(t, ns), jsstore.Config{Stream: stream, Clock: clock.Now})
	other := open(t, connect(t, ns), jsstore.Config{Stream: stream, Clock: clock.Now})
	const p = "proj"
	tests := []struct {
		name string
		// between runs once between the check and the write, on other.
		between func(ctx context.Context, turn, call string, old *cardstore.Claim) error
		err     error  // of the old holder's put
		msg     string // in its message
		stored  bool   // the old holder's result is the call's result
		heldBy  string // the claim's holder afterwards ("": none)
	}{
		{"take-over", func(ctx context.Context, turn, call string, old *cardstore.Claim) error {
			clock.Add(2 * time.Minute)
			c, err := other.ClaimTool(ctx, cardstore.ClaimRequest{ProjectID: p, Key: old.Key, Holder: "new", Lease: time.Hour}, weather)
			if err == nil && !c.TakenOver {
				t.Errorf("claim by new = %+v, want a take-over", c)
			}
			return err
		}, cardstore.ErrClaimLost, "is now held by new with token 2", false, "new"},
		{"take-over by StartCallTool", func(ctx context.Context, turn, call string, old *cardstore.Claim) error {
			clock.Add(2 * time.Minute)
			res, err := other.StartCallTool(ctx, cardstore.StartCallRequest{ProjectID: p, AgentTurnID: turn, ToolCallID: call, Holder: "new", Lease: time.Hour}, weather)
			if err == nil && (res.Claim == nil || !res.Claim.TakenOver) {
				t.Errorf("start by new = %+v, want a take-over", res)
			}
			return err
		}, cardstore.ErrClaimLost, "is now held by new with token 2", false, "new"},
		{"renewal by the holder", func(ctx context.Context, turn, call string, old *cardstore.Claim) error {
			_, err := other.ClaimTool(ctx, cardstore.ClaimRequest{ProjectID: p, Key: old.Key, Holder: "old", Lease: time.Hour}, weather)
			return err
		}, nil, "", true, ""},
		{"another result (a cancel)", func(ctx context.Context, turn, call string, old *cardstore.Claim) error {
			return other.Put(ctx, resultCard(p, turn, call))
		}, cardstore.ErrResultExists, "already has result card", false, ""},
		{"release by the holder", func(ctx context.Context, turn, call string, old *cardstore.Claim) error {
			return other.ReleaseTool(ctx, p, old.Key, "old", weather)
		}, cardstore.ErrForbidden, "has no claim", false, ""},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			turn, call := "turn", "call-"+string(rune('a'+i))
			if err := s.Put(ctx, storetest.ToolCallCard(p, turn, call)); err != nil {
				t.Fatal(err)
			}
			old, err := s.ClaimTool(ctx, cardstore.ClaimRequest{ProjectID: p, Key: cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String(), Holder: "old", Lease: time.Minute}, weather)
			if err != nil {
				t.Fatal(err)
			}
			var plans atomic.Int32
			jsstore.SetBeforeWrite(s, func() {
				if plans.Add(1) == 1 {
					if err := tc.between(ctx, turn, call, old); err != nil {
						t.Errorf("write between check and batch: %v", err)
					}
				}
			})
			defer jsstore.SetBeforeWrite(s, nil)
			late := resultCard(p, turn, call)
			err = s.PutToolResult(ctx, weather, "old", old.Token, late)
			if tc.err == nil && err != nil {
				t.Fatalf("put_result: %v", err)
			}
			if tc.err != nil && (!errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.msg)) {
				t.Fatalf("put_result: %v, want %v saying %q", err, tc.err, tc.msg)
			}
			if n := plans.Load(); n < 2 && tc.err != nil {
				t.Fatalf("the batch was planned %d times, want it planned again after the injected write", n)
			}
			got, err := s.FindToolResult(ctx, p, turn, call)
			switch {
			case tc.stored && (err != nil || got.CardID != late.CardID):
				t.Fatalf("call's result = %v, %v; want the put's card %s", got, err, late.CardID)
			case !tc.stored && err == nil && got.CardID == late.CardID:
				t.Fatalf("the refused result %s is the call's result", late.CardID)
			}
			c, err := s.GetClaim(ctx, p, old.Key)
			switch {
			case tc.heldBy == "" && !errors.Is(err, cardstore.ErrNotFound):
				t.Fatalf("claim afterwards = %+v, %v; want none", c, err)
			case tc.heldBy != "" && (err != nil || c.Holder != tc.heldBy):
				t.Fatalf("claim afterwards = %+v, %v; want it held by %s", c, err, tc.heldBy)
			}
		})
	}
}

// TestLegacyClaims: a stream written before claims kept their tool (the
// tool was in the holder, "tool:<tool>/<holder>", written by natsstore's
// generic checks) is read as if written now, so a worker holding such a
// claim when its mesh is upgraded keeps it. A holder of a core claim that
// looks like that prefix, written now, stays as it is.
func TestLegacyClaims(t *testing.T) {
	ns := startServer(t, "")
	s := open(t, connect(t, ns), jsstore.Config{})
	ctx := t.Context()
	const p = "proj"
	expires := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	legacy := func(turn, call, holder string, token int) string {
		key := cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String()
		data := `{"holder":"` + holder + `","token":` + string(rune('0'+token)) + `,"expires_at":"` + expires + `"}`
		if err := jsstore.PutRawClaim(ctx, s, p, key, []byte(data)); err != nil {
			t.Fatal(err)
		}
		return key
	}
	claim := func(key, holder, tool string) (*cardstore.Claim, error) {
		req := cardstore.ClaimRequest{ProjectID: p, Key: key, Holder: holder, Lease: time.Hour}
		if tool == "" {
			return s.Claim(ctx, req)
		}
		return s.ClaimTool(ctx, req, tool)
	}

	k1 := legacy("t1", "c1", "tool:"+weather+"/w1/1", 3)
	tests := []struct {
		name, holder, tool string
		err                error
	}{
		{"renewal for another tool", "w1/1", "calc_add", cardstore.ErrForbidden},
		{"renewal by the core", "w1/1", "", cardstore.ErrForbidden},
		{"another holder", "w2", weather, cardstore.ErrClaimHeld},
		{"renewal by its holder and tool", "w1/1", weather, nil},
	}
	for _, tc := range tests {
		c, err := claim(k1, tc.holder, tc.tool)
		if tc.err != nil {
			var held *cardstore.ClaimHeldError
			if !errors.Is(err, tc.err) || (errors.As(err, &held) && held.Holder != "w1/1") {
				t.Fatalf("%s: %v, want %v (naming holder w1/1)", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || c.Token != 3 || c.TakenOver || c.Holder != "w1/1" {
			t.Fatalf("%s: %+v, %v; want w1/1's claim with token 3, renewed", tc.name, c, err)
		}
	}
	if c, err := s.GetClaim(ctx, p, k1); err != nil || c.Holder != "w1/1" || c.Token != 3 {
		t.Fatalf("GetClaim of a legacy claim = %+v, %v; want holder w1/1 (without the tool), token 3", c, err)
	}
	if err := s.PutToolResult(ctx, weather, "w1/1", 3, resultCard(p, "t1", "c1")); err != nil {
		t.Fatalf("result under a legacy claim: %v", err)
	}

	k2 := legacy("t2", "c2", "tool:"+weather+"/w1", 1)
	if err := s.ReleaseTool(ctx, p, k2, "w1", "calc_add"); !errors.Is(err, cardstore.ErrForbidden) {
		t.Fatalf("release of a legacy claim for another tool: %v, want ErrForbidden", err)
	}
	if err := s.ReleaseTool(ctx, p, k2, "w1", weather); err != nil {
		t.Fatalf("release of a legacy claim by its holder and tool: %v", err)
	}

	// Core claims of either format keep their holder as written.
	k3 := legacy("t3", "c3", "core", 1)
	if c, err := claim(k3, "core", ""); err != nil || c.Token != 1 || c.TakenOver {
		t.Fatalf("renewal of a legacy core claim = %+v, %v; want token 1", c, err)
	}
	odd := "tool:x/y"
	if _, err := claim("k/odd", odd, ""); err != nil {
		t.Fatal(err)
	}
	if c, err := s.GetClaim(ctx, p, "k/odd"); err != nil || c.Holder != odd {
		t.Fatalf("GetClaim of a core claim held by %q = %+v, %v; want the holder as written", odd, c, err)
	}
	if err := s.Release(ctx, p, "k/odd", odd); err != nil {
		t.Fatalf("release of a core claim held by %q: %v", odd, err)
	}
}
