package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestPendingConfirmHint: a pending result (protocol §19) prints the
// command that calls the resolver it names: 'utpmesh confirm' / 'utpmesh
// cancel' for the defaults (ATLAS_CONFIRM, ATLAS_CANCEL, what those
// commands call), else 'utpmesh call' of its own confirm_tool /
// cancel_tool with the confirmation id; a result of another shape prints
// nothing.
func TestPendingConfirmHint(t *testing.T) {
	for _, tc := range []struct {
		name, result, project string
		want                  []string // lines, in order; nil: not pending
	}{
		{"defaults", `{"status":"PENDING_CONFIRM","confirmation_id":"cfm_calendar_1","tool_name":"CALENDAR_CREATE_BLOCKS","would":{"action":"create calendar blocks"},"expires_at":"2024-01-16T10:30:00Z"}`, "demo", []string{
			"PENDING_CONFIRM: CALENDAR_CREATE_BLOCKS did not run yet; it waits for confirmation cfm_calendar_1",
			"  it would:   create calendar blocks",
			`  details:    {"action":"create calendar blocks"}`,
			"  expires:    2024-01-16T10:30:00Z",
			"  confirm it: utpmesh confirm cfm_calendar_1",
			"  cancel it:  utpmesh cancel cfm_calendar_1",
		}},
		{"defaults named, other project", `{"status":"PENDING_CONFIRM","confirmation_id":"c1","tool_name":"x","confirm_tool":"ATLAS_CONFIRM","cancel_tool":"ATLAS_CANCEL"}`, "p2", []string{
			"PENDING_CONFIRM: x did not run yet; it waits for confirmation c1",
			"  confirm it: utpmesh confirm c1 --project p2",
			"  cancel it:  utpmesh cancel c1 --project p2",
		}},
		{"own resolvers", `{"status":"PENDING_CONFIRM","confirmation_id":"h1","tool_name":"book","would":"a room","expires_at":"","confirm_tool":"book_confirm","cancel_tool":"book_cancel"}`, "p2", []string{
			"PENDING_CONFIRM: book did not run yet; it waits for confirmation h1",
			`  details:    "a room"`,
			`  confirm it: utpmesh call book_confirm --args '{"confirmation_id":"h1"}' --project p2`,
			`  cancel it:  utpmesh call book_cancel --args '{"confirmation_id":"h1"}' --project p2`,
		}},
		{"own confirm, default cancel", `{"status":"PENDING_CONFIRM","confirmation_id":"h2","tool_name":"book","confirm_tool":"book_confirm"}`, "demo", []string{
			"PENDING_CONFIRM: book did not run yet; it waits for confirmation h2",
			`  confirm it: utpmesh call book_confirm --args '{"confirmation_id":"h2"}'`,
			"  cancel it:  utpmesh cancel h2",
		}},
		{"not pending", `{"status":"PENDING","task_id":"hem_1"}`, "demo", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := pendingConfirm(json.RawMessage(tc.result))
			if ok != (tc.want != nil) {
				t.Fatalf("pendingConfirm ok = %v, want %v", ok, tc.want != nil)
			}
			if !ok {
				return
			}
			var b strings.Builder
			printPendingConfirm(&b, p, tc.project)
			if got, want := b.String(), strings.Join(tc.want, "\n")+"\n"; got != want {
				t.Errorf("printed\n%s\nwant\n%s", got, want)
			}
		})
	}
}
