package confirm_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/confirm"
)

// TestParse: which results are pending confirmations, and the resolvers
// each one names (defaults when it names none).
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, result        string
		ok                  bool
		confirmTool, cancel string
		summary             string
	}{
		{"atlas shape", `{"status":"PENDING_CONFIRM","confirmation_id":"cfm_calendar_1","tool_name":"CALENDAR_CREATE_BLOCKS","would":{"action":"create calendar blocks"},"expires_at":"2024-01-16T10:30:00Z"}`,
			true, confirm.DefaultConfirmTool, confirm.DefaultCancelTool, "create calendar blocks"},
		{"own resolvers", `{"status":"PENDING_CONFIRM","confirmation_id":"h1","tool_name":"book","would":"a room","expires_at":"","confirm_tool":"book_confirm","cancel_tool":"book_cancel"}`,
			true, "book_confirm", "book_cancel", ""},
		{"one resolver named", `{"status":"PENDING_CONFIRM","confirmation_id":"h1","confirm_tool":"yes"}`,
			true, "yes", confirm.DefaultCancelTool, ""},
		{"no id", `{"status":"PENDING_CONFIRM","tool_name":"x"}`, false, "", "", ""},
		{"other status", `{"status":"OK","confirmation_id":"cfm_x"}`, false, "", "", ""},
		{"status elsewhere", `{"note":"PENDING_CONFIRM","confirmation_id":"cfm_x"}`, false, "", "", ""},
		{"not an object", `["PENDING_CONFIRM"]`, false, "", "", ""},
		{"null", `null`, false, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := confirm.Parse(json.RawMessage(tc.result))
			if ok != tc.ok {
				t.Fatalf("Parse ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if c, x := p.Resolvers(); c != tc.confirmTool || x != tc.cancel {
				t.Errorf("Resolvers = %q, %q; want %q, %q", c, x, tc.confirmTool, tc.cancel)
			}
			if p.Resolver(true) != tc.confirmTool || p.Resolver(false) != tc.cancel {
				t.Errorf("Resolver(true/false) = %q/%q", p.Resolver(true), p.Resolver(false))
			}
			if p.Summary() != tc.summary {
				t.Errorf("Summary = %q, want %q", p.Summary(), tc.summary)
			}
		})
	}
}

// TestPendingWire: a Pending that names no resolvers encodes exactly as
// ATLAS results did before the convention (docs/protocol.md §16.3).
func TestPendingWire(t *testing.T) {
	p := confirm.Pending{Status: confirm.StatusPending, ConfirmationID: "cfm_calendar_3f9a0c1d2e4b5a69", ToolName: "CALENDAR_CREATE_BLOCKS",
		Would: json.RawMessage(`{"action":"create calendar blocks"}`), ExpiresAt: "2024-01-16T10:30:00Z"}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"status":"PENDING_CONFIRM","confirmation_id":"cfm_calendar_3f9a0c1d2e4b5a69","tool_name":"CALENDAR_CREATE_BLOCKS","would":{"action":"create calendar blocks"},"expires_at":"2024-01-16T10:30:00Z"}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	p.ConfirmTool, p.CancelTool = "a", "b"
	b, _ = json.Marshal(p)
	if got, ok := confirm.Parse(b); !ok || got.ConfirmTool != "a" || got.CancelTool != "b" {
		t.Errorf("round trip of %s = %+v, %v", b, got, ok)
	}
}

// TestExpired: ExpiresAt in the past expires; empty or unreadable never.
func TestExpired(t *testing.T) {
	now := time.Date(2024, 1, 16, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		at   string
		want bool
	}{
		{"2024-01-16T10:30:00Z", true},
		{"2024-01-16T12:30:00Z", false},
		{"", false},
		{"tomorrow", false},
	} {
		if got := (&confirm.Pending{ExpiresAt: tc.at}).Expired(now); got != tc.want {
			t.Errorf("Expired(%q) = %v, want %v", tc.at, got, tc.want)
		}
	}
}

// TestArgs: a resolver's arguments, and the ids refused.
func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want string
		err  error
	}{
		{"cfm_calendar_1", `{"confirmation_id":"cfm_calendar_1"}`, nil},
		{"", "", confirm.ErrInvalidID},
		{string(make([]byte, confirm.MaxIDLen+1)), "", confirm.ErrInvalidID},
	} {
		got, err := confirm.Args(tc.id)
		if !errors.Is(err, tc.err) || (err == nil && string(got) != tc.want) {
			t.Errorf("Args(%.20q) = %s, %v; want %s, %v", tc.id, got, err, tc.want, tc.err)
		}
	}
}

// TestParseResolution: a card content with a complete "transition" is a
// resolution record, whatever else it carries.
func TestParseResolution(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		ok            bool
		to            string
	}{
		{"atlas receipt", `{"kind":"transition","tool_call":{},"transition":{"confirmation_id":"cfm_c_1","tool_call_id":"c1","tool_name":"T","from":"PENDING_CONFIRM","to":"OK","by_tool_call_id":"b","by_agent_turn_id":"ui-1","at_utc":"2024-01-15T10:31:00Z"}}`, true, confirm.StatusOK},
		{"bare", `{"transition":{"confirmation_id":"x","tool_call_id":"c1","to":"SKIPPED"}}`, true, confirm.StatusSkipped},
		{"no to", `{"transition":{"confirmation_id":"x","tool_call_id":"c1"}}`, false, ""},
		{"no call", `{"transition":{"confirmation_id":"x","to":"OK"}}`, false, ""},
		{"call receipt", `{"kind":"call","tool_call":{"status":"OK"}}`, false, ""},
		{"null transition", `{"transition":null}`, false, ""},
		{"not json", `transition`, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := confirm.ParseResolution(json.RawMessage(tc.content))
			if ok != tc.ok || (ok && r.To != tc.to) {
				t.Errorf("ParseResolution = %+v, %v; want to %q, %v", r, ok, tc.to, tc.ok)
			}
		})
	}
}
