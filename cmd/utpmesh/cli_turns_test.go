package main

import (
	"fmt"
	"regexp"
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
		// Every turn of the project, newest first, without naming an agent:
		// the replays made above are newer than t-det, which is newer than t-1.
		all := decodeJSON[turnsPage](t, cm.must(t, 0, "turns", "ls", "--json").stdout)
		ids := make([]string, len(all.Turns))
		for i, r := range all.Turns {
			ids[i] = r.AgentTurnID
		}
		if len(all.Turns) != 5 || all.Next != 0 || ids[2] != "t-det-replay" || ids[3] != "t-det" || ids[4] != "t-1" ||
			!strings.HasPrefix(ids[0], "replay-") || !strings.HasPrefix(ids[1], "replay-") {
			t.Fatalf("ls --json = %v (next %d), want 2 replay-… turns, t-det-replay, t-det, t-1", ids, all.Next)
		}
		t1 := all.Turns[4]
		if t1.AgentID != "agent-7" || t1.ToolCalls != 4 || t1.ToolResults != 4 || t1.Cards != 8 || t1.LastAt.Before(t1.FirstAt) {
			t.Fatalf("t-1 = %+v, want agent-7 with 4 calls, 4 results, 8 cards", t1)
		}
		r := cm.must(t, 0, "turns", "ls")
		wantContains(t, "ls", r.stdout, "TURN", "AGENT", "CALLS", "RESULTS", "t-1", "agent-7", "t-det")
		if strings.Contains(r.stdout, "older turns follow") {
			t.Fatalf("ls of 5 turns with the default limit offers more:\n%s", r.stdout)
		}

		// Pages of 2, following the printed hint, give the same turns.
		var paged []string
		args := []string{"turns", "ls", "--limit", "2"}
		for pages := 1; ; pages++ {
			text := cm.must(t, 0, args...).stdout
			page := decodeJSON[turnsPage](t, cm.must(t, 0, append(args, "--json")...).stdout)
			for _, r := range page.Turns {
				paged = append(paged, r.AgentTurnID)
			}
			if page.Next == 0 {
				if pages != 3 || strings.Contains(text, "older turns follow") {
					t.Fatalf("last page %d:\n%s", pages, text)
				}
				break
			}
			hint := fmt.Sprintf("older turns follow: utpmesh turns ls --before %d --limit 2\n", page.Next)
			wantContains(t, "page with more", text, hint)
			args = strings.Fields(strings.TrimPrefix(strings.TrimSuffix(hint, "\n"), "older turns follow: utpmesh "))
		}
		if strings.Join(paged, ",") != strings.Join(ids, ",") {
			t.Fatalf("paged ls = %v, want %v", paged, ids)
		}

		list := decodeJSON[turnsPage](t, cm.must(t, 0, "turns", "ls", "--agent", "agent-7", "--pending", "--json").stdout)
		if len(list.Turns) != 1 || list.Turns[0].AgentTurnID != "t-1" || list.Turns[0].Pending != 1 {
			t.Fatalf("ls --pending = %+v", list)
		}
		r = cm.must(t, 0, "turns", "ls", "--agent", "agent-7", "--pending")
		wantContains(t, "ls --pending", r.stdout, "PENDING", "t-1")
		r = cm.must(t, 0, "turns", "ls", "--agent", "nobody")
		wantContains(t, "ls of an agent without turns", r.stdout, "agent nobody has no turns in project demo")
		none := decodeJSON[turnsPage](t, cm.must(t, 0, "turns", "ls", "--project", "empty", "--json").stdout)
		if none.Turns == nil || len(none.Turns) != 0 {
			t.Fatalf("ls of an empty project = %+v, want an empty list", none)
		}
	})

	t.Run("show prints the card ids of each call", func(t *testing.T) {
		tr := decodeJSON[turn.Turn](t, cm.must(t, 0, "turns", "show", "t-1", "--json").stdout)
		out := cm.must(t, 0, "turns", "show", "t-1").stdout
		wantContains(t, "show", out, "cards of each call (print them: utpmesh cards get CARD_ID..., or utpmesh cards get TOOL_CALL_ID --turn t-1):",
			"TOOL_CALL_ID", "TOOL.CALL CARD", "TOOL.RESULT CARD")
		for _, cl := range tr.Calls {
			if cl.CallCardID == "" || cl.ResultCardID == "" {
				t.Fatalf("call %s lacks a card id: %+v", cl.ToolCallID, cl)
			}
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(cl.ToolCallID) + ` +` + cl.CallCardID + ` +` + cl.ResultCardID + `$`).MatchString(out) {
				t.Fatalf("show lacks the line %s %s %s:\n%s", cl.ToolCallID, cl.CallCardID, cl.ResultCardID, out)
			}
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
		{"ls pending without agent", 2, []string{"turns", "ls", "--pending"}, "--pending needs --agent"},
		{"ls with limit 0", 2, []string{"turns", "ls", "--limit", "0"}, "--limit 0: give a number from 1 to 1000"},
		{"ls with a turn", 2, []string{"turns", "ls", "t-1"}, "utpmesh turns show t-1"},
		{"help", 0, []string{"turns", "--help"}, "Exit codes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cm.must(t, tc.code, tc.args...)
			wantContains(t, "output", r.stdout+r.stderr, tc.want)
		})
	}
}
