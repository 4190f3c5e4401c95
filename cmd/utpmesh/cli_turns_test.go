package main

import (
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/turn"
)

func TestCLITurns(t *testing.T) {
	cm := startCLIMesh(t)
	// A recorded turn: echo (deterministic), counter (changes every run),
	// fail (fails the same way every time).
	cm.must(t, 0, "call", "echo", "--agent", "agent-7", "--turn", "t-1", "--epoch", "1", "--step", "s1", "--tool-call-id", "c-echo", "--args", `{"city":"Oslo"}`)
	cm.must(t, 0, "call", "counter", "--agent", "agent-7", "--turn", "t-1", "--epoch", "1", "--step", "s1", "--tool-call-id", "c-counter")
	cm.must(t, 1, "call", "fail", "--agent", "agent-7", "--turn", "t-1", "--epoch", "1", "--step", "s2", "--tool-call-id", "c-fail")
	// A turn with only the deterministic tool.
	cm.must(t, 0, "call", "echo", "--agent", "agent-7", "--turn", "t-det", "--step", "s1", "--tool-call-id", "d1", "--args", `{"a":[1,2]}`)

	t.Run("show", func(t *testing.T) {
		r := cm.must(t, 0, "turns", "show", "t-1")
		wantContains(t, "timeline", r.stdout,
			"turn t-1 · project demo · agent agent-7 · epochs 1 · 3 calls (2 success, 1 failed) · 6 cards",
			"echo  c-echo  step s1  epoch 1", `args    {"city":"Oslo"}`, "result  success · suspend · ",
			"fail  c-fail  step s2", "error   bad_request: fail always fails")
		tr := decodeJSON[turn.Turn](t, cm.must(t, 0, "turns", "show", "t-1", "--json").stdout)
		if len(tr.Calls) != 3 || tr.Calls[2].Error == nil || tr.Calls[2].Status != "failed" || tr.Calls[0].Duration <= 0 || tr.Calls[0].ResultCardID == "" {
			t.Fatalf("show --json = %+v", tr)
		}
		r = cm.must(t, 1, "turns", "show", "no-such-turn")
		wantContains(t, "missing turn", r.stderr, `has no card of turn "no-such-turn"`)
	})

	t.Run("replay deterministic is equal", func(t *testing.T) {
		r := cm.must(t, 0, "turns", "replay", "t-det", "--as", "t-det-replay")
		wantContains(t, "replay", r.stdout, "replay of turn t-det as turn t-det-replay", "#1    equal      echo  d1", "1 call replayed: 1 equal, 0 different, 0 errors")
		// The replayed turn is a turn of its own; the original is untouched.
		cm.must(t, 0, "turns", "show", "t-det-replay")
		r = cm.must(t, 0, "turns", "show", "t-det")
		wantContains(t, "original", r.stdout, "1 call (1 success) · 2 cards")
	})

	t.Run("replay names the differing path", func(t *testing.T) {
		r := cm.must(t, 1, "turns", "replay", "t-1")
		wantContains(t, "replay", r.stdout, "equal      echo  c-echo", "DIFFERENT  counter  c-counter", "changed /result/n: 1 → ", "equal      fail  c-fail",
			"3 calls replayed: 2 equal, 1 different, 0 errors")
		wantContains(t, "replay", r.stderr, "1 of 3 calls came out different")
		rep := decodeJSON[turn.Report](t, cm.must(t, 1, "turns", "replay", "t-1", "--json", "--concurrency", "3").stdout)
		if rep.Different != 1 || rep.Equal != 2 || rep.Calls[1].Changes[0].Path != "/result/n" {
			t.Fatalf("replay --json = %+v", rep)
		}
	})

	t.Run("dry run", func(t *testing.T) {
		r := cm.must(t, 0, "turns", "replay", "t-1", "--dry-run", "--as", "t-plan")
		wantContains(t, "plan", r.stdout, "plan: replay turn t-1 as turn t-plan · project demo · 3 calls", "counter  c-counter  step s1  epoch 1  recorded success")
		cm.must(t, 1, "turns", "show", "t-plan") // nothing ran
		p := decodeJSON[turn.Plan](t, cm.must(t, 0, "turns", "replay", "t-1", "--dry-run", "--json").stdout)
		if len(p.Steps) != 3 || !strings.HasPrefix(p.NewTurnID, "replay-") {
			t.Fatalf("plan --json = %+v", p)
		}
	})

	t.Run("resume", func(t *testing.T) {
		// A dispatched call whose result nobody consumed.
		cm.must(t, 0, "call", "echo", "--agent", "agent-7", "--turn", "t-1", "--epoch", "1", "--step", "s3", "--tool-call-id", "c-late", "--wait=false")
		deadline := time.Now().Add(30 * time.Second)
		for {
			rr := decodeJSON[turn.ResumeReport](t, cm.must(t, 0, "turns", "resume", "t-1", "--json").stdout)
			if len(rr.Unconsumed) == 1 && rr.Unconsumed[0].InboxID != "" {
				if rr.AgentID != "agent-7" || len(rr.Finished) != 3 || rr.Unconsumed[0].ToolCallID != "c-late" || len(rr.Steps) != 3 {
					t.Fatalf("resume = %+v", rr)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("c-late never became unconsumed: %+v", rr)
			}
			time.Sleep(20 * time.Millisecond)
		}
		r := cm.must(t, 0, "turns", "resume", "t-1")
		wantContains(t, "resume", r.stdout, "0 outstanding (no result yet) · 1 unconsumed (result not acknowledged) · 3 finished", "step s3", "unconsumed   echo  c-late  success")
	})

	t.Run("ls", func(t *testing.T) {
		r := cm.must(t, 0, "turns", "ls", "--agent", "agent-7")
		wantContains(t, "ls", r.stdout, "TURN", "t-1", "t-det")
		list := decodeJSON[[]turnSummary](t, cm.must(t, 0, "turns", "ls", "--agent", "agent-7", "--pending", "--json").stdout)
		if len(list) != 1 || list[0].AgentTurnID != "t-1" || list[0].Pending != 1 {
			t.Fatalf("ls --pending = %+v", list)
		}
	})

	for _, tc := range []struct {
		name string
		code int
		args []string
		want string
	}{
		{"no subcommand", 2, []string{"turns"}, "name a subcommand"},
		{"typo", 2, []string{"turns", "replya", "t-1"}, "did you mean 'utpmesh turns replay'?"},
		{"show without turn", 2, []string{"turns", "show"}, "name the turn"},
		{"replay into itself", 2, []string{"turns", "replay", "t-1", "--as", "t-1"}, "the replayed turn's own id"},
		{"bad concurrency", 2, []string{"turns", "replay", "t-1", "--concurrency", "0"}, "--concurrency must be at least 1"},
		{"ls without agent", 2, []string{"turns", "ls"}, "--agent is required"},
		{"help", 0, []string{"turns", "--help"}, "Exit codes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cm.must(t, tc.code, tc.args...)
			wantContains(t, "output", r.stdout+r.stderr, tc.want)
		})
	}
}
