package utp_test

import (
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/utp"
)

// TestCallRefUnambiguous: calls whose ids joined with a separator collide
// get different keys and message ids; the same call always gets the same.
func TestCallRefUnambiguous(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b utp.CallRef
	}{
		{"dash", utp.Ref("p", "t-1", "2"), utp.Ref("p", "t", "1-2")},
		{"slash", utp.Ref("p", "a/b", "c"), utp.Ref("p", "a", "b/c")},
		{"project", utp.Ref("p-t", "1", "2"), utp.Ref("p", "t-1", "2")},
		{"nul", utp.Ref("p", "a\x00", "b"), utp.Ref("p", "a", "\x00b")},
		{"digits", utp.Ref("p", "1:a", "b"), utp.Ref("p", "", "a1:b")},
		{"empty", utp.Ref("", "ab", ""), utp.Ref("", "a", "b")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.a.Key() == tc.b.Key() {
				t.Errorf("Key: %+v and %+v both give %q", tc.a, tc.b, tc.a.Key())
			}
			if tc.a.MsgID() == tc.b.MsgID() {
				t.Errorf("MsgID: %+v and %+v both give %q", tc.a, tc.b, tc.a.MsgID())
			}
			again := utp.Ref(tc.a.ProjectID, tc.a.AgentTurnID, tc.a.ToolCallID)
			if again.Key() != tc.a.Key() || again.MsgID() != tc.a.MsgID() {
				t.Error("the same call gave another key or message id")
			}
			if id := tc.a.MsgID(); !strings.HasPrefix(id, "cmd-") || len(id) != 68 {
				t.Errorf("MsgID %q: want cmd- and 64 hex digits", id)
			}
		})
	}
}
