package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/card"
)

func TestCLICallAndCards(t *testing.T) {
	cm := startCLIMesh(t)

	r := cm.must(t, 0, "call", "echo", "--args", `{"x":1}`)
	wantContains(t, "call echo", r.stdout, "success · suspend · ", `"x": 1`)

	out := decodeJSON[callOutput](t, cm.must(t, 0, "call", "echo", "--args", `{"y":2}`, "--turn", "t-call", "--step", "s1", "--tool-call-id", "c1", "--json").stdout)
	if out.Status != card.StatusSuccess || out.AgentTurnID != "t-call" || out.ToolCallID != "c1" || out.StepID != "s1" || compact(out.Result) != `{"y":2}` {
		t.Fatalf("call --json = %+v", out)
	}

	argsFile := filepath.Join(t.TempDir(), "args.json")
	if err := os.WriteFile(argsFile, []byte(`{"from":"file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r = cm.must(t, 0, "call", "echo", "--args", "@"+argsFile)
	wantContains(t, "call --args @file", r.stdout, `"from": "file"`)

	r = cm.must(t, 1, "call", "fail", "--turn", "t-call", "--tool-call-id", "c2")
	wantContains(t, "failed call", r.stdout, "failed · suspend")
	wantContains(t, "failed call", r.stderr, "call failed: bad_request: fail always fails")

	r = cm.must(t, 0, "call", "echo", "--wait=false", "--turn", "t-call", "--tool-call-id", "c3")
	wantContains(t, "dispatch", r.stdout, "dispatched echo  tool_call_id c3  turn t-call")

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no tool", []string{"call"}, "name the tool to call"},
		{"unknown tool", []string{"call", "nope"}, `tool "nope" is not registered in project "demo"`},
		{"args not an object", []string{"call", "echo", "--args", `[1]`}, "--args must be a JSON object"},
		{"args file missing", []string{"call", "echo", "--args", "@/no/such/file"}, "--args @/no/such/file"},
		{"bad after_execution", []string{"call", "echo", "--after-execution", "pause"}, "use suspend or terminate"},
		{"two tools", []string{"call", "echo", "x"}, "call takes one tool name"},
		{"bad project", []string{"call", "echo", "--project", "a b"}, "project_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cm.must(t, 2, tc.args...)
			wantContains(t, "stderr", r.stderr, tc.want)
		})
	}

	// cards get: the call's cards, in the order asked, as a JSON array.
	cards := decodeJSON[[]card.Card](t, cm.must(t, 0, "cards", "get", out.ResultCardID, out.ToolCallCardID).stdout)
	if len(cards) != 2 || cards[0].Type != card.TypeToolResult || cards[1].Type != card.TypeToolCall || cards[1].ToolCallID != "c1" {
		t.Fatalf("cards get = %+v", cards)
	}
	missing := card.NewID()
	r = cm.must(t, 1, "cards", "get", out.ToolCallCardID, missing)
	if got := decodeJSON[[]card.Card](t, r.stdout); len(got) != 1 {
		t.Fatalf("cards get with a missing id printed %d cards", len(got))
	}
	wantContains(t, "missing card", r.stderr, "has no card "+missing)
	r = cm.must(t, 2, "cards", "get", "not-a-uuid")
	wantContains(t, "bad id", r.stderr, `"not-a-uuid" is not a card id`)
	cm.must(t, 2, "cards")
	cm.must(t, 2, "cards", "get")
	r = cm.must(t, 0, "cards", "get", "--help")
	if !strings.Contains(r.stdout, "always") {
		t.Fatalf("cards get --help does not say the output is always JSON:\n%s", r.stdout)
	}
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}
