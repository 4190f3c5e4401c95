package confirm_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/confirm"
)

// FuzzParse: any tool result either is a pending confirmation — with an id
// and resolver tools — or is not; any card content either is a resolution
// or is not. Never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"status":"PENDING_CONFIRM","confirmation_id":"cfm_1","tool_name":"X","would":"do","expires_at":"2026-01-01T00:00:00Z"}`,
		`{"status":"PENDING_CONFIRM","confirmation_id":"c","confirm_tool":"a","cancel_tool":"b"}`,
		`{"transition":{"confirmation_id":"c","to":"CONFIRMED"}}`,
		`{"status":"PENDING_CONFIRM"}`, `[]`, `null`, `"x"`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if p, ok := confirm.Parse(json.RawMessage(raw)); ok {
			if p.ConfirmationID == "" {
				t.Fatalf("Parse(%s) is pending without a confirmation id", raw)
			}
			if c, x := p.Resolvers(); c == "" || x == "" {
				t.Fatalf("Parse(%s): resolvers %q, %q; want both named", raw, c, x)
			}
			_ = p.Summary()
			_ = p.Expired(time.Now())
		}
		_, _ = confirm.ParseResolution(json.RawMessage(raw))
	})
}
