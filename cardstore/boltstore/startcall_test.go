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

// TestStartCallCommits: starting a call that has a result writes nothing
// (no commit, so no fsync); starting a fresh call is one write request.
func TestStartCallCommits(t *testing.T) {
	obs := &commits{}
	s, _ := openStore(t, boltstore.WithCommitObserver(obs))
	ctx := t.Context()
	answered := storetest.ToolResultCard("p", "turn", "answered", card.StatusSuccess)
	fresh := storetest.ToolCallCard("p", "turn", "fresh")
	if err := s.Put(ctx, answered, fresh); err != nil {
		t.Fatal(err)
	}
	requests := func() int { obs.mu.Lock(); defer obs.mu.Unlock(); return obs.requests }
	before := requests()
	req := cardstore.StartCallRequest{ProjectID: "p", AgentTurnID: "turn", ToolCallID: "answered", Holder: "w1", Lease: time.Minute}
	for range 3 {
		res, err := s.StartCall(ctx, req)
		if err != nil || res.Result == nil || res.Result.CardID != answered.CardID || res.Claim != nil {
			t.Fatalf("start of an answered call = %+v, %v; want its result", res, err)
		}
	}
	if got := requests(); got != before {
		t.Fatalf("starting an answered call three times made %d write requests, want none", got-before)
	}
	req.ToolCallID, req.ToolCallCardID = "fresh", fresh.CardID
	res, err := s.StartCall(ctx, req)
	if err != nil || res.Claim == nil || res.CallCard == nil {
		t.Fatalf("start of a fresh call = %+v, %v; want a claim and the call card", res, err)
	}
	if got := requests(); got != before+1 {
		t.Fatalf("starting a fresh call made %d write requests, want 1", got-before)
	}
}

// TestStartCallTool: StartCallTool keeps ClaimTool's rules: another
// tool's call is forbidden, the claim records the tool (only that tool
// renews or releases it, or writes the result under it), and a call that
// has a result returns it to any tool.
func TestStartCallTool(t *testing.T) {
	s, _ := openStore(t)
	ctx := t.Context()
	call := storetest.ToolCallCard("p", "turn", "c1") // calls weather.get
	if err := s.Put(ctx, call); err != nil {
		t.Fatal(err)
	}
	req := cardstore.StartCallRequest{ProjectID: "p", AgentTurnID: "turn", ToolCallID: "c1", ToolCallCardID: call.CardID, Holder: "w1", Lease: time.Minute}
	if _, err := s.StartCallTool(ctx, req, "echo"); !errors.Is(err, cardstore.ErrForbidden) {
		t.Fatalf("echo starting a weather.get call = %v, want ErrForbidden", err)
	}
	weather := subjects.ToolToken("weather.get")
	res, err := s.StartCallTool(ctx, req, weather)
	if err != nil || res.Claim == nil || res.Claim.Token != 1 || res.CallCard == nil || res.CallCard.CardID != call.CardID {
		t.Fatalf("weather.get starting its call = %+v, %v; want the claim and the card", res, err)
	}
	key := cardstore.CallKey{AgentTurnID: "turn", ToolCallID: "c1"}.String()
	if _, err := s.ClaimTool(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: key, Holder: "w1", Lease: time.Minute}, "echo"); !errors.Is(err, cardstore.ErrForbidden) {
		t.Fatalf("renewal for another tool = %v, want ErrForbidden", err)
	}
	if err := s.ReleaseTool(ctx, "p", key, "w1", "echo"); !errors.Is(err, cardstore.ErrForbidden) {
		t.Fatalf("release for another tool = %v, want ErrForbidden", err)
	}
	result := storetest.ToolResultCard("p", "turn", "c1", card.StatusSuccess)
	if err := s.PutToolResult(ctx, weather, "w1", res.Claim.Token, result); err != nil {
		t.Fatalf("result under the started claim: %v", err)
	}
	for _, tl := range []string{weather, "echo"} {
		got, err := s.StartCallTool(ctx, req, tl)
		if err != nil || got.Result == nil || got.Result.CardID != result.CardID || got.Claim != nil {
			t.Fatalf("%s starting the answered call = %+v, %v; want its result", tl, got, err)
		}
	}
}
