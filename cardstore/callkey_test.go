package cardstore_test

import (
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/cardstore"
)

// TestCallKeyString: the key keeps the documented plain form for turn ids
// without '/' or '%', and escapes exactly those two in the turn only.
func TestCallKeyString(t *testing.T) {
	tests := []struct {
		turn, call, want string
	}{
		{"turn-1", "call-1", "toolcall/turn-1/call-1"},
		{"t", "x/y", "toolcall/t/x/y"},
		{"t/x", "y", "toolcall/t%2Fx/y"},
		{"t%x", "y", "toolcall/t%25x/y"},
		{"t%2Fx", "y", "toolcall/t%252Fx/y"},
		{"/", "/", "toolcall/%2F//"},
		{"%", "%", "toolcall/%25/%"},
		{"tür", "ca ll", "toolcall/tür/ca ll"},
	}
	for _, tc := range tests {
		k := cardstore.CallKey{AgentTurnID: tc.turn, ToolCallID: tc.call}
		if got := k.String(); got != tc.want {
			t.Errorf("CallKey{%q, %q} = %q, want %q", tc.turn, tc.call, got, tc.want)
		}
		back, ok := cardstore.ParseCallKey(tc.want)
		if !ok || back != k {
			t.Errorf("ParseCallKey(%q) = %+v, %v; want %+v", tc.want, back, ok, k)
		}
	}
}

// TestCallKeyDistinct: pairs whose plain join is the same get different
// keys.
func TestCallKeyDistinct(t *testing.T) {
	groups := [][]cardstore.CallKey{
		{{AgentTurnID: "t/x", ToolCallID: "y"}, {AgentTurnID: "t", ToolCallID: "x/y"}},
		{{AgentTurnID: "a/b/c", ToolCallID: "d"}, {AgentTurnID: "a/b", ToolCallID: "c/d"}, {AgentTurnID: "a", ToolCallID: "b/c/d"}},
		{{AgentTurnID: "t%2Fx", ToolCallID: "y"}, {AgentTurnID: "t/x", ToolCallID: "y"}},
		{{AgentTurnID: "t%25", ToolCallID: "y"}, {AgentTurnID: "t%", ToolCallID: "y"}},
	}
	for _, g := range groups {
		seen := map[string]cardstore.CallKey{}
		for _, k := range g {
			s := k.String()
			if prev, ok := seen[s]; ok {
				t.Errorf("%+v and %+v share the key %q", prev, k, s)
			}
			seen[s] = k
		}
	}
}

// TestParseCallKeyRefuses: keys that name no call.
func TestParseCallKeyRefuses(t *testing.T) {
	for _, key := range []string{
		"",
		"toolcall/",
		"toolcall/t",
		"toolcall//c",      // empty turn
		"toolcall/t/",      // empty call
		"lease/t/c",        // another prefix
		"toolcall/t%2fx/y", // lower-case escape: not the one written form
		"toolcall/t%2/y",   // truncated escape
		"toolcall/t%41/y",  // an escape String never writes
		"toolcall/t%/y",    // bare '%'
		"toolcall/t\x00/y", // NUL
		"toolcall/t/\xff",  // invalid UTF-8
		"toolcall/" + strings.Repeat("t", 257) + "/c", // turn too long
	} {
		if k, ok := cardstore.ParseCallKey(key); ok {
			t.Errorf("ParseCallKey(%q) = %+v, true; want false", key, k)
		}
	}
}

// FuzzCallKey: every valid pair round-trips, and every key ParseCallKey
// accepts formats back to itself, so no two pairs share a key.
func FuzzCallKey(f *testing.F) {
	for _, s := range [][2]string{{"t", "c"}, {"t/x", "y"}, {"t", "x/y"}, {"%2F", "%"}, {"a%25/b", "/"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, turn, call string) {
		k := cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}
		s := k.String()
		valid := cardstore.CheckKeyPart("t", turn) == nil && cardstore.CheckKeyPart("c", call) == nil
		back, ok := cardstore.ParseCallKey(s)
		if ok != valid || (ok && back != k) {
			t.Fatalf("ParseCallKey(%q) = %+v, %v; want %+v, %v", s, back, ok, k, valid)
		}
		// Any string, read as a key: accepted only in its one written form.
		raw := "toolcall/" + turn + "/" + call
		if p, ok := cardstore.ParseCallKey(raw); ok && p.String() != raw {
			t.Fatalf("ParseCallKey(%q) = %+v, which formats as %q", raw, p, p.String())
		}
	})
}
