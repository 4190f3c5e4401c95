package main

import (
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/turn"
)

func TestCLICardsGet(t *testing.T) {
	cm := startCLIMesh(t)
	uuidCall := card.NewID() // a tool_call_id that looks like a card id
	cm.must(t, 0, "call", "echo", "--agent", "agent-c", "--turn", "t-c", "--tool-call-id", "c-1", "--args", `{"n":1}`)
	cm.must(t, 0, "call", "echo", "--agent", "agent-c", "--turn", "t-c", "--tool-call-id", "c-2", "--args", `{"n":2}`)
	cm.must(t, 0, "call", "echo", "--agent", "agent-c", "--turn", "t-c", "--tool-call-id", uuidCall, "--args", `{"n":3}`)
	tr := decodeJSON[turn.Turn](t, cm.must(t, 0, "turns", "show", "t-c", "--json").stdout)
	if len(tr.Calls) != 3 {
		t.Fatalf("turn t-c = %+v, want 3 calls", tr)
	}
	c1, c2, c3 := tr.Calls[0], tr.Calls[1], tr.Calls[2]

	// got lists "type:tool_call_id:card_id" of each printed card.
	got := func(t *testing.T, stdout string) string {
		t.Helper()
		if stdout == "" {
			return "(no output)"
		}
		var out []string
		for _, c := range decodeJSON[[]card.Card](t, stdout) {
			out = append(out, c.Type+":"+c.ToolCallID+":"+c.CardID)
		}
		return strings.Join(out, " ")
	}
	call := func(c turn.Call) string { return "tool.call:" + c.ToolCallID + ":" + c.CallCardID }
	result := func(c turn.Call) string { return "tool.result:" + c.ToolCallID + ":" + c.ResultCardID }
	join := func(s ...string) string { return strings.Join(s, " ") }

	tests := []struct {
		name   string
		code   int
		args   []string
		want   string // the printed cards ("" for an empty array)
		stderr string
	}{
		{"card ids in the order asked, each once", 0, []string{c2.ResultCardID, c1.CallCardID, c2.ResultCardID}, join(result(c2), call(c1)), ""},
		{"a tool_call_id with --turn is the call's cards", 0, []string{"c-1", "--turn", "t-c"}, join(call(c1), result(c1)), ""},
		{"tool_call_ids and card ids mixed", 0, []string{"c-2", c1.ResultCardID, "c-1", "--turn", "t-c"},
			join(call(c2), result(c2), result(c1), call(c1)), ""},
		{"a UUID tool_call_id with --turn", 0, []string{uuidCall, "--turn", "t-c"}, join(call(c3), result(c3)), ""},
		{"a tool_call_id without --turn", 2, []string{"c-1"}, "(no output)",
			`"c-1" is not a card id; if it is a tool_call_id pass --turn TURN`},
		{"a UUID tool_call_id without --turn", 1, []string{uuidCall}, "",
			"project demo has no card " + uuidCall + "; if it is a tool_call_id pass --turn TURN"},
		{"neither with --turn", 2, []string{"c-9", "--turn", "t-c"}, "(no output)",
			`"c-9" is neither a card id nor a tool_call_id of turn t-c (its tool_call_ids: c-1, c-2, ` + uuidCall + ")"},
		{"a missing card id with --turn", 1, []string{c1.CallCardID, strings.Repeat("0", 8) + c1.CallCardID[8:], "--turn", "t-c"}, call(c1),
			"and turn t-c has no tool_call_id of that name"},
		{"an unknown turn", 1, []string{"c-1", "--turn", "t-none"}, "(no output)", `project demo has no card of turn "t-none"`},
		{"no ids", 2, nil, "(no output)", "name the card ids to print"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := cm.must(t, tc.code, append([]string{"cards", "get"}, tc.args...)...)
			if g := got(t, r.stdout); g != tc.want {
				t.Fatalf("printed cards\n got: %s\nwant: %s", g, tc.want)
			}
			wantContains(t, "stderr", r.stderr, tc.stderr)
		})
	}
}
