package turn_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/turn"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// testMesh is a real mesh with echo and three test tools: counter (a
// different result on every execution), fail (always bad_request) and
// block (waits until release is closed).
type testMesh struct {
	m       *mesh.Mesh
	release chan struct{}
}

func startMesh(t *testing.T) *testMesh {
	t.Helper()
	tm := &testMesh{release: make(chan struct{})}
	var n atomic.Int64
	tools := []worker.Tool{
		echo.Tool(),
		{Name: "counter", Description: "returns how many times it ran", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
			return worker.OK(map[string]any{"n": n.Add(1), "args": json.RawMessage(c.Arguments)}), nil
		}},
		{Name: "fail", Description: "always fails", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
			return worker.Result{}, worker.Fail(card.CodeBadRequest, "fail always fails")
		}},
		{Name: "block", Description: "waits for the test", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
			select {
			case <-tm.release:
				return worker.OK(map[string]bool{"released": true}), nil
			case <-ctx.Done():
				return worker.Result{}, ctx.Err()
			}
		}},
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := mesh.Start(context.Background(), mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Tools: tools, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	tm.m = m
	t.Cleanup(func() {
		select {
		case <-tm.release:
		default:
			close(tm.release)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	})
	return tm
}

func (tm *testMesh) client(t *testing.T, agentID string) *agent.Client {
	t.Helper()
	c, err := agent.New(tm.m.Conn(), agent.Config{Project: "demo", AgentID: agentID, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func call(t *testing.T, c *agent.Client, req agent.CallRequest) *agent.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.Call(ctx, req)
	if err != nil {
		t.Fatalf("call %s: %v", req.ToolName, err)
	}
	return out
}

// TestLoadReplayResume records a turn through the real mesh, reconstructs
// it, replays it (echo and fail come out equal, counter differs at
// /result/n), and checks that the original cards were not touched.
func TestLoadReplayResume(t *testing.T) {
	tm := startMesh(t)
	ctx := context.Background()
	orig := tm.client(t, "agent-1")
	const tid = "turn-rec"
	call(t, orig, agent.CallRequest{ToolName: "echo", Arguments: json.RawMessage(`{"x":1}`), AgentTurnID: tid, TurnEpoch: 1, StepID: "s1", ToolCallID: "c-echo", Mandate: "tok.en.sig"})
	call(t, orig, agent.CallRequest{ToolName: "counter", Arguments: json.RawMessage(`{"k":"v"}`), AgentTurnID: tid, TurnEpoch: 1, StepID: "s1", ToolCallID: "c-counter"})
	call(t, orig, agent.CallRequest{ToolName: "fail", AgentTurnID: tid, TurnEpoch: 2, StepID: "s2", ToolCallID: "c-fail"})

	tr, err := turn.Load(ctx, tm.m.Cards(), "demo", tid)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Calls) != 3 || tr.Cards != 6 || tr.AgentID != "agent-1" || len(tr.Problems) != 0 {
		t.Fatalf("turn = %+v", tr)
	}
	if c := tr.Calls[0]; c.ToolCallID != "c-echo" || c.Status != "success" || !c.HasMandate || c.Mandate != "" || c.Duration <= 0 {
		t.Fatalf("echo call = %+v", c)
	}
	if c := tr.Calls[2]; c.Status != "failed" || c.Error == nil || c.Error.Code != card.CodeBadRequest || c.TurnEpoch != 2 {
		t.Fatalf("fail call = %+v", c)
	}

	for _, tc := range []struct {
		name        string
		concurrency int
	}{{"sequential", 1}, {"concurrent", 4}} {
		t.Run("replay "+tc.name, func(t *testing.T) {
			var progress []int
			rep, err := turn.Replay(ctx, tm.client(t, "replayer"), tr, turn.ReplayOptions{Concurrency: tc.concurrency,
				Progress: func(done, total int) { progress = append(progress, done*10+total) }})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Equal != 2 || rep.Different != 1 || rep.Errors != 0 || rep.AllEqual() {
				t.Fatalf("report: %d equal, %d different, %d errors", rep.Equal, rep.Different, rep.Errors)
			}
			if len(progress) != 3 || progress[2] != 33 {
				t.Fatalf("progress calls = %v", progress)
			}
			byID := map[string]turn.ReplayedCall{}
			for _, c := range rep.Calls {
				byID[c.Step.ToolCallID] = c
			}
			if c := byID["c-echo"]; !c.Equal || c.Replayed.Status != "success" {
				t.Fatalf("echo = %+v", c)
			}
			if c := byID["c-fail"]; !c.Equal || c.Replayed.ErrorCode != card.CodeBadRequest {
				t.Fatalf("fail = %+v", c)
			}
			c := byID["c-counter"]
			if c.Equal || len(c.Changes) != 1 || c.Changes[0].Path != "/result/n" || c.Changes[0].Op != turn.OpChanged {
				t.Fatalf("counter changes = %+v", c.Changes)
			}
			// The new turn has its own cards: same ids, arguments, steps,
			// created_at and mandate; the original is untouched.
			nt, err := turn.Load(ctx, tm.m.Cards(), "demo", rep.Plan.NewTurnID)
			if err != nil {
				t.Fatal(err)
			}
			if len(nt.Calls) != 3 || nt.AgentID != "replayer" {
				t.Fatalf("new turn = %+v", nt)
			}
			for i, oc := range tr.Calls {
				var nc *turn.Call
				for j := range nt.Calls {
					if nt.Calls[j].ToolCallID == oc.ToolCallID {
						nc = &nt.Calls[j]
					}
				}
				if nc == nil || nc.StepID != oc.StepID || !nc.CalledAt.Equal(oc.CalledAt) || string(nc.Arguments) != string(oc.Arguments) || nc.Mandate != oc.Mandate {
					t.Fatalf("replayed call %d = %+v, original %+v", i, nc, oc)
				}
			}
			again, err := turn.Load(ctx, tm.m.Cards(), "demo", tid)
			if err != nil || again.Cards != tr.Cards {
				t.Fatalf("original turn after replay: %v cards, err %v", again.Cards, err)
			}
			var out strings.Builder
			if err := turn.WriteReport(&out, rep); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "changed /result/n: ") || !strings.Contains(out.String(), "3 calls replayed: 2 equal, 1 different, 0 errors") {
				t.Fatalf("report text:\n%s", out.String())
			}
		})
	}

	t.Run("plan", func(t *testing.T) {
		p, err := turn.PlanReplay(tr, turn.ReplayOptions{NewTurnID: "turn-new"})
		if err != nil || p.NewTurnID != "turn-new" || len(p.Steps) != 3 || !p.Steps[0].HasMandate || p.Steps[2].TurnEpoch != 2 {
			t.Fatalf("plan = %+v, %v", p, err)
		}
		if _, err := turn.PlanReplay(tr, turn.ReplayOptions{NewTurnID: tid}); !errors.Is(err, turn.ErrInvalid) {
			t.Fatalf("replay into the same turn: err = %v, want ErrInvalid", err)
		}
	})

	t.Run("resume", func(t *testing.T) {
		// One finished call (Call acked it), one unconsumed (dispatched,
		// result arrived, not acked) and one outstanding (blocked).
		const rid = "turn-resume"
		call(t, orig, agent.CallRequest{ToolName: "echo", AgentTurnID: rid, StepID: "s1", ToolCallID: "r-done"})
		if _, err := orig.Dispatch(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: rid, StepID: "s1", ToolCallID: "r-unconsumed"}); err != nil {
			t.Fatal(err)
		}
		if _, err := orig.Dispatch(ctx, agent.CallRequest{ToolName: "block", AgentTurnID: rid, StepID: "s2", ToolCallID: "r-out"}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			r, err := turn.Resume(ctx, orig, rid)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Unconsumed) == 1 && r.Unconsumed[0].InboxID != "" {
				if len(r.Finished) != 1 || len(r.Outstanding) != 1 || r.Unconsumed[0].ToolCallID != "r-unconsumed" || r.Unconsumed[0].InboxID == "" ||
					r.Outstanding[0].ToolCallID != "r-out" || r.Outstanding[0].Status != turn.StatusPending || len(r.Steps) != 2 ||
					r.Steps[1].StepID != "s2" || r.Steps[1].Outstanding[0] != "r-out" {
					t.Fatalf("resume = %+v", r)
				}
				var out strings.Builder
				_ = turn.WriteResume(&out, r)
				if !strings.Contains(out.String(), "1 outstanding (no result yet) · 1 unconsumed (result not acknowledged) · 1 finished") {
					t.Fatalf("resume text:\n%s", out.String())
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the dispatched echo's result never became unconsumed: %+v", r)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// A replay of a turn with a pending call compares against "pending".
		tr2, err := turn.Load(ctx, tm.m.Cards(), "demo", rid)
		if err != nil {
			t.Fatal(err)
		}
		if tr2.Counts[turn.StatusPending] != 1 {
			t.Fatalf("counts = %v", tr2.Counts)
		}
	})

	t.Run("errors", func(t *testing.T) {
		if _, err := turn.Load(ctx, tm.m.Cards(), "demo", "no-such-turn"); !errors.Is(err, turn.ErrNotFound) {
			t.Fatalf("missing turn: %v", err)
		}
		if _, err := turn.Load(ctx, tm.m.Cards(), "bad project", "t"); !errors.Is(err, turn.ErrInvalid) {
			t.Fatalf("bad project: %v", err)
		}
		if _, err := turn.Replay(ctx, tm.client(t, "x"), tr, turn.ReplayOptions{Concurrency: -1}); !errors.Is(err, turn.ErrInvalid) {
			t.Fatalf("negative concurrency: %v", err)
		}
		// A tool that is gone is an Error of its call, not of the replay.
		gone := turn.FromCards("demo", "t-gone", []*card.Card{callCard(1, "t-gone", "g1", "no_such_tool", `{}`, "s1", 1, 0)})
		rep, err := turn.Replay(ctx, tm.client(t, "x"), gone, turn.ReplayOptions{})
		if err != nil || rep.Errors != 1 || !strings.Contains(rep.Calls[0].Error, "not registered") {
			t.Fatalf("replay of an unknown tool: %+v, %v", rep, err)
		}
	})
}
