package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoMandateByDefault: against a mesh with the Cedar gate on, run from
// the directory of a local 'up' (./utpmesh-data/demo-mandate.jwt exists),
// calls without --mandate use the demo mandate and say so once; from
// elsewhere they end auth_failed with an error that says what to type.
func TestDemoMandateByDefault(t *testing.T) {
	root := t.TempDir()
	cm := startGatedMesh(t, root)
	const notice = "using the demo mandate ./utpmesh-data/demo-mandate.jwt (pass --mandate to use another)\n"

	t.Run("elsewhere: auth_failed says what to type", func(t *testing.T) {
		t.Chdir(t.TempDir())
		r := cm.must(t, 1, "call", "echo", "--args", `{"x":1}`)
		wantContains(t, "stderr", r.stderr, "call failed: auth_failed: project demo requires a mandate and no mandate was given: ",
			"pass --mandate FILE (a local 'utpmesh up' writes one to <its --data dir>/demo-mandate.jwt)",
			"or issue one: utpmesh mandate issue --project demo --agent AGENT --policy FILE.cedar --data DIR")
		if strings.Contains(r.stderr, "metadata.mandate") || strings.Contains(r.stderr, "agent.Config") {
			t.Fatalf("the error names library fields:\n%s", r.stderr)
		}
		// With the mandate passed as the hint says, from anywhere.
		demo := filepath.Join(root, "utpmesh-data", "demo-mandate.jwt")
		r = cm.must(t, 0, "call", "echo", "--args", `{"x":1}`, "--mandate", demo)
		wantContains(t, "stdout", r.stdout, "success · ", `"x": 1`)
		if r.stderr != "" {
			t.Fatalf("an explicit --mandate printed on stderr:\n%s", r.stderr)
		}
	})

	t.Run("in the directory of up: the demo mandate", func(t *testing.T) {
		t.Chdir(root)
		r := cm.must(t, 0, "call", "echo", "--args", `{"x":1}`)
		wantContains(t, "stdout", r.stdout, "success · suspend · ", `"x": 1`)
		if r.stderr != notice {
			t.Fatalf("stderr = %q, want exactly the notice %q", r.stderr, notice)
		}
		// confirm and cancel resolve the mandate the same way: the gate lets
		// ATLAS_CANCEL through, and the tool answers about the id.
		r = cm.must(t, 1, "cancel", "cfm_calendar_0123456789abcdef", "--timeout", "30s")
		wantContains(t, "cancel", r.stderr, notice, "no confirmation cfm_calendar_0123456789abcdef")
		// Another agent than the mandate's: the hint says to drop --agent.
		r = cm.must(t, 1, "call", "echo", "--agent", "mallory")
		wantContains(t, "stderr", r.stderr, `call failed: auth_failed: mandate `, `is for agent "demo-agent", the call comes from agent "mallory"`,
			"the mandate used was ./utpmesh-data/demo-mandate.jwt", "drop --agent")
		// An explicit --mandate wins, with no notice.
		r = cm.must(t, 2, "call", "echo", "--mandate", "nofile")
		if strings.Contains(r.stderr, "using the demo mandate") {
			t.Fatalf("the demo mandate was used although --mandate was given:\n%s", r.stderr)
		}
	})

	t.Run("replay keeps the recorded mandates, not the demo default", func(t *testing.T) {
		t.Chdir(root)
		cm.must(t, 0, "call", "echo", "--args", `{"x":2}`, "--turn", "t-rep")
		r := cm.must(t, 0, "turns", "replay", "t-rep", "--as", "t-rep-2")
		wantContains(t, "replay", r.stdout, "1 call replayed: 1 equal")
		if strings.Contains(r.stderr, "using the demo mandate") {
			t.Fatalf("replay used the demo mandate instead of the recorded one:\n%s", r.stderr)
		}
	})

	t.Run("receipts of a turn that does not exist", func(t *testing.T) {
		r := cm.must(t, 1, "receipts", "show", "NO-SUCH-TURN")
		wantContains(t, "stderr", r.stderr, "project demo has no turn NO-SUCH-TURN", "utpmesh turns ls --project demo")
		if r.stdout != "" {
			t.Fatalf("receipts of no turn printed:\n%s", r.stdout)
		}
		r = cm.must(t, 0, "call", "echo", "--turn", "t-echo", "--mandate", filepath.Join(root, "utpmesh-data", "demo-mandate.jwt"))
		r = cm.must(t, 0, "receipts", "show", "t-echo")
		wantContains(t, "stdout", r.stdout, "receipt of turn t-echo (project demo): 0 ATLAS tool calls", "no ATLAS call")
	})
}
