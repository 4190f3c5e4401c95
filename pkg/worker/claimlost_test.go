package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// stallingStore is the worker's CardStore with a switch that holds its
// claim renewals back (as a stalled process or a slow disk would), and
// reports of the worker's StartCall and result writes.
type stallingStore struct {
	// The interface, not *boltstore.Store, whose PutWithEntry would
	// bypass the Put below.
	cardstore.Store
	stall   atomic.Bool
	resume  chan struct{} // closed: held renewals go through
	starts  chan string   // tool_call_id of every StartCall
	results chan string   // tool_call_id of every tool.result the worker writes
}

func (s *stallingStore) StartCall(ctx context.Context, req cardstore.StartCallRequest) (*cardstore.StartCallResult, error) {
	select {
	case s.starts <- req.ToolCallID:
	default: // the test reads only the first few
	}
	return s.Store.StartCall(ctx, req)
}

func (s *stallingStore) Claim(ctx context.Context, req cardstore.ClaimRequest) (*cardstore.Claim, error) {
	if s.stall.Load() {
		<-s.resume
	}
	return s.Store.Claim(ctx, req)
}

func (s *stallingStore) Put(ctx context.Context, cards ...*card.Card) error {
	for _, c := range cards {
		if c.Type == card.TypeToolResult {
			select {
			case s.results <- c.ToolCallID:
			default:
			}
		}
	}
	return s.Store.Put(ctx, cards...)
}

// TestClaimLostWritesNoResult: an execution whose claim another holder
// took over (its renewals stalled past the lease) cancels its handler and
// writes no result, whatever the handler then returns, on a local CardStore as on a remote one (where the
// result would be refused, claim_lost): the call is the new holder's, and
// the new holder's result is its one result. The stale execution used to
// write a failed "lost its claim" result, which won the call on a local
// store although the new holder was running it.
func TestClaimLostWritesNoResult(t *testing.T) {
	for _, tc := range []struct {
		name string
		// end is what the handler returns once its context is canceled.
		end func(ctx context.Context) (worker.Result, error)
	}{
		{"handler stops", func(ctx context.Context) (worker.Result, error) { return worker.Result{}, ctx.Err() }},
		{"handler ignores the cancel and succeeds", func(context.Context) (worker.Result, error) {
			return worker.Result{Value: map[string]string{"by": "stale"}}, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { testClaimLost(t, tc.end) })
	}
}

func testClaimLost(t *testing.T, end func(ctx context.Context) (worker.Result, error)) {
	const lease = 300 * time.Millisecond
	started := make(chan struct{}, 4)
	stopped := make(chan error, 4)
	slow := worker.Tool{Name: "slow", Handler: func(ctx context.Context, _ *worker.Call) (worker.Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return end(ctx)
	}}
	var st *stallingStore
	h := newHarnessWrapped(t, worker.Config{ClaimLease: lease, AckWait: 10 * time.Second}, nil,
		func(b *boltstore.Store) cardstore.Store {
			st = &stallingStore{Store: b, resume: make(chan struct{}), starts: make(chan string, 16), results: make(chan string, 16)}
			return st
		}, slow)

	c := h.writeCall("slow", `{}`)
	h.publish(toolSubject("slow"), c.command("slow"), nil)
	wait := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s within 10s", what)
		}
	}
	wait("handler start", started)
	if id := <-st.starts; id != c.id {
		t.Fatalf("StartCall of %s, want %s", id, c.id)
	}

	// Renewals stall; once the lease lapses another holder takes over.
	st.stall.Store(true)
	key := cardstore.CallKey{AgentTurnID: c.turn, ToolCallID: c.id}.String()
	deadline := time.Now().Add(10 * time.Second)
	var thief *cardstore.Claim
	for {
		var err error
		thief, err = st.Store.Claim(context.Background(), cardstore.ClaimRequest{ProjectID: project, Key: key, Holder: "thief", Lease: time.Minute})
		if err == nil {
			break
		}
		if !errors.Is(err, cardstore.ErrClaimHeld) || time.Now().After(deadline) {
			t.Fatalf("take the claim over: %v", err)
		}
		time.Sleep(lease / 4)
	}
	if !thief.TakenOver {
		t.Fatalf("thief's claim %+v is not a take-over", thief)
	}
	close(st.resume) // the held renewal now finds the claim taken

	select {
	case cause := <-stopped:
		if cause == nil || cause.Error() != "claim lost" {
			t.Fatalf("handler stopped with cause %v, want the claim lost", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler not stopped within 10s of losing its claim")
	}
	// The stale execution ends by leaving the command for redelivery: the
	// next StartCall of the call shows it is over, with no result written.
	select {
	case id := <-st.results:
		t.Fatalf("the execution that lost its claim wrote a result for %s", id)
	case id := <-st.starts:
		if id != c.id {
			t.Fatalf("StartCall of %s, want %s", id, c.id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("neither a result nor a redelivery within 10s of the handler's stop")
	}
	select {
	case id := <-st.results:
		t.Fatalf("a result for %s was written although the thief holds the call", id)
	default:
	}

	// The new holder's result is the call's one result.
	res := &card.Card{CardID: card.NewID(), ProjectID: project, Type: card.TypeToolResult, AuthorID: "thief",
		Content: []byte(`{"status":"success","result":{"by":"thief"},"after_execution":"suspend"}`), ToolCallID: c.id, CreatedAt: time.Now().UTC(),
		Metadata: card.Metadata{AgentID: agentID, AgentTurnID: c.turn, ToolCallID: c.id, FunctionName: "slow", Role: "tool"}}
	if err := st.Store.Put(context.Background(), res); err != nil {
		t.Fatalf("the new holder's result: %v", err)
	}
	if got, err := st.Store.FindToolResult(context.Background(), project, c.turn, c.id); err != nil || got.CardID != res.CardID {
		t.Fatalf("the call's result = %v, %v; want the new holder's %s", got, err, res.CardID)
	}
}

// flakyResultStore fails the worker's first tool.result write (as a
// CardStore that is briefly unavailable would) and reports every Release.
type flakyResultStore struct {
	// The interface, not *boltstore.Store, whose PutWithEntry would
	// bypass the Put below.
	cardstore.Store
	failed   atomic.Bool
	releases chan string // keys of the worker's Release calls
}

func (s *flakyResultStore) Put(ctx context.Context, cards ...*card.Card) error {
	for _, c := range cards {
		if c.Type == card.TypeToolResult && s.failed.CompareAndSwap(false, true) {
			return errors.New("cardstore briefly unavailable")
		}
	}
	return s.Store.Put(ctx, cards...)
}

func (s *flakyResultStore) Release(ctx context.Context, projectID, key, holder string) error {
	select {
	case s.releases <- key:
	default:
	}
	return s.Store.Release(ctx, projectID, key, holder)
}

// TestMalformedCommandRetryReleasesClaim: a malformed but routable command
// is ended with a bad_request result under a claim; when writing that
// result fails for a passing reason, the worker gives the claim back
// before the retry (§7.4), so the redelivery neither waits out the lease
// nor counts as a take-over. It used to keep the claim.
func TestMalformedCommandRetryReleasesClaim(t *testing.T) {
	var st *flakyResultStore
	h := newHarnessWrapped(t, worker.Config{}, nil, func(b *boltstore.Store) cardstore.Store {
		st = &flakyResultStore{Store: b, releases: make(chan string, 8)}
		return st
	})
	c := h.writeCall("echo", `{}`)
	cmd := c.command("echo")
	cmd["after_execution"] = "pause" // routable, malformed: a bad_request result
	h.publish(toolSubject("echo"), cmd, nil)

	select {
	case key := <-st.releases:
		if want := (cardstore.CallKey{AgentTurnID: c.turn, ToolCallID: c.id}).String(); key != want {
			t.Fatalf("released %q, want %q", key, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the claim was not given back after the failed result write")
	}
	rep, _ := h.awaitReport(c.id)
	if _, tr := h.result(rep); tr.Error == nil || tr.Error.Code != card.CodeBadRequest {
		t.Fatalf("result after the retry: %+v", tr)
	}
	if s := h.rt.Stats()["echo"]; s.ClaimTakeovers != 0 {
		t.Fatalf("claim take-overs = %d, want 0 (nothing died)", s.ClaimTakeovers)
	}
}
