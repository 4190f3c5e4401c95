package main

import (
	"regexp"
	"strings"
	"testing"
)

// hintCommand returns the arguments of the first "utpmesh …" command the
// output prints after label (e.g. "confirm it:"), so a test runs exactly
// what a user would copy and paste.
func hintCommand(t *testing.T, out, label string) []string {
	t.Helper()
	re := regexp.MustCompile(regexp.QuoteMeta(label) + ` +utpmesh ([^\n]+)`)
	m := re.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("output has no %q command:\n%s", label, out)
	}
	return strings.Fields(m[1])
}

// TestPendingConfirmAndUndo drives the confirmation and undo hints with a
// real gated mesh serving atlas.calendar: a PENDING_CONFIRM result says
// what waits and how to confirm or cancel it, a confirmed result says how
// to undo it, and undo runs exactly once.
func TestPendingConfirmAndUndo(t *testing.T) {
	root := t.TempDir()
	cm := startGatedMesh(t, root)
	t.Chdir(root) // where 'up' keeps ./utpmesh-data: calls use its demo mandate
	block := func(start, end string) string {
		return `{"title":"Focus ` + start + `","start":"` + start + `","end":"` + end + `","type":"focus"}`
	}
	create := func(turn, callID string, blocks ...string) result {
		t.Helper()
		args := `{"date":"2024-01-15","blocks":[` + strings.Join(blocks, ",") + `]}`
		return cm.must(t, 0, "call", "CALENDAR_CREATE_BLOCKS", "--args", args, "--turn", turn, "--tool-call-id", callID)
	}

	// One block: pending, confirmed, undone by the printed command, once.
	r := create("t-one", "c-one", block("09:00", "10:00"))
	wantContains(t, "pending call", r.stdout, "success · suspend · ",
		"PENDING_CONFIRM: CALENDAR_CREATE_BLOCKS did not run yet; it waits for confirmation cfm_calendar_",
		"  it would:   create calendar blocks\n", `"title":"Focus 09:00"`, "  expires:    ",
		"  confirm it: utpmesh confirm cfm_calendar_", "  cancel it:  utpmesh cancel cfm_calendar_")
	if strings.Contains(r.stdout, "undo it with") {
		t.Fatalf("a pending call offers an undo:\n%s", r.stdout)
	}
	confirm := hintCommand(t, r.stdout, "confirm it:")
	r = cm.must(t, 1, "undo", "c-one", "--turn", "t-one")
	wantContains(t, "undo before confirm", r.stderr, "nothing to undo: CALENDAR_CREATE_BLOCKS c-one has not run yet, it waits for confirmation "+confirm[1],
		"utpmesh cancel "+confirm[1])
	r = cm.must(t, 0, append(confirm, "--turn", "t-confirm")...)
	wantContains(t, "confirm", r.stdout, "CALENDAR_CREATE_BLOCKS "+confirm[1]+": OK", "undo: CALENDAR_DELETE_BLOCKS")
	undo := hintCommand(t, r.stdout, "undo it with:")
	if undo[0] != "undo" || undo[2] != "--turn" || undo[3] != "t-confirm" {
		t.Fatalf("undo hint = %q", undo)
	}
	r = cm.must(t, 0, undo...)
	wantContains(t, "undo", r.stdout, "undo of ATLAS_CONFIRM "+undo[1]+" (turn t-confirm): CALENDAR_DELETE_BLOCKS",
		"success · suspend · ", "tool_call_id undo-"+undo[1], `"deleted": [`)
	r = cm.must(t, 1, undo...)
	wantContains(t, "second undo", r.stderr, "nothing to undo: call "+undo[1]+" of turn t-confirm was undone already by call undo-"+undo[1])
	// Undoing the original call finds the same undo, already done.
	r = cm.must(t, 1, "undo", "c-one", "--turn", "t-one")
	wantContains(t, "undo of the original", r.stderr, "was confirmed by call "+undo[1]+" of turn t-confirm", "was undone already")

	// Two blocks: the undo (deleting two blocks) itself waits for
	// confirmation, and says how to confirm it.
	r = create("t-two", "c-two", block("11:00", "12:00"), block("12:00", "13:00"))
	r = cm.must(t, 0, append(hintCommand(t, r.stdout, "confirm it:"), "--turn", "t-confirm2")...)
	r = cm.must(t, 0, "undo", "c-two", "--turn", "t-two")
	wantContains(t, "pending undo", r.stdout, "CALENDAR_DELETE_BLOCKS did not run yet; it waits for confirmation cfm_calendar_",
		"  it would:   delete calendar blocks\n", "  confirm it: utpmesh confirm cfm_calendar_", "  cancel it:  utpmesh cancel cfm_calendar_")
	confirmUndo := hintCommand(t, r.stdout, "confirm it:")
	r = cm.must(t, 1, "undo", "c-two", "--turn", "t-two")
	wantContains(t, "undo while the undo waits", r.stderr, "the undo of call", "was started already", "waits for confirmation: utpmesh "+strings.Join(confirmUndo, " "))
	r = cm.must(t, 0, confirmUndo...)
	wantContains(t, "confirm the undo", r.stdout, "CALENDAR_DELETE_BLOCKS "+confirmUndo[1]+": OK")

	// A cancelled call never ran; an echo result carries no undo.
	r = create("t-three", "c-three", block("14:00", "15:00"))
	cm.must(t, 0, hintCommand(t, r.stdout, "cancel it:")...)
	r = cm.must(t, 1, "undo", "c-three", "--turn", "t-three")
	wantContains(t, "undo of a cancelled call", r.stderr, "nothing to undo: CALENDAR_CREATE_BLOCKS c-three was cancelled")
	cm.must(t, 0, "call", "echo", "--turn", "t-echo", "--tool-call-id", "c-echo")
	r = cm.must(t, 1, "undo", "c-echo", "--turn", "t-echo")
	wantContains(t, "undo of echo", r.stderr, "nothing to undo: the result of call c-echo (echo) carries no undo step")

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no such call", []string{"undo", "c-nope", "--turn", "t-one"}, 1, "turn t-one of project demo has no tool call c-nope (see its calls with 'utpmesh turns show t-one')"},
		{"no such turn", []string{"undo", "c-one", "--turn", "t-nope"}, 1, "project demo has no turn t-nope"},
		{"no turn given", []string{"undo", "c-one"}, 2, "undo needs the call's turn: utpmesh undo c-one --turn TURN"},
		{"no call given", []string{"undo"}, 2, "want 'utpmesh undo CALL_ID --turn TURN'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cm.must(t, tc.code, tc.args...)
			wantContains(t, "stderr", r.stderr, tc.want)
		})
	}
}
