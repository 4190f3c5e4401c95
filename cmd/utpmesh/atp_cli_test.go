package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	atptools "github.com/utpmesh/utpmesh/services/atp/tools"
)

// startATPMesh starts a gated mesh serving the ATP catalogue the way
// 'utpmesh up' does (booking states wired into the gate, the demo policy
// and mandate in root/utpmesh-data).
func startATPMesh(t *testing.T, root string) *cliMesh {
	t.Helper()
	return startServicesMesh(t, root, []string{"atp"}, func(dir string) *mesh.AuthConfig {
		return &mesh.AuthConfig{Catalogues: authCatalogues(dir)}
	})
}

func TestATPAndHEMCommands(t *testing.T) {
	root := t.TempDir()
	cm := startATPMesh(t, root)
	t.Chdir(root) // the CLI finds the demo mandate as next to a local 'up'

	out := cm.must(t, 0, "atp", "booking", "create", "--fixture", "--advance-to", "CONFIRMED").stdout
	m := regexp.MustCompile(`booking ([0-9a-f-]{36}) created \(state PRE_JOURNEY\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("create: %s", out)
	}
	id := m[1]
	got := decodeJSON[map[string]any](t, cm.must(t, 0, "atp", "booking", "get", id, "--json").stdout)
	if got["state"] != "CONFIRMED" || got["tool_state"] != "PRE_JOURNEY" || got["title"] != "Niseko ski week (demo)" {
		t.Fatalf("get: %v", got)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"atp", "booking", "create"}, 2, "--fixture"},
		{[]string{"atp", "booking", "transition", id}, 2, "BOOKING_ID STATE"},
		{[]string{"atp", "booking", "transition", id, "DONE"}, 1, "PRE_JOURNEY, JOURNEY, RESUME"},
		{[]string{"atp", "booking", "transition", id, "COMPLETION"}, 1, "atp_illegal_transition"},
		{[]string{"atp", "bookng"}, 2, "did you mean 'utpmesh atp booking'"},
		{[]string{"hem", "decline", "hem_x"}, 2, "--reason is required"},
		// The HEM decisions are operators': this mesh has no identities,
		// so 'utpmesh hem' dispatches as the default operator
		// (TestHEMAsOperator runs them against 'up' with identities).
		{[]string{"hem", "confirm", "hem_nope"}, 1, "no such task"},
		{[]string{"hem", "ls"}, 0, "TASK"},
	} {
		r := cm.run(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr+r.stdout, tc.want) {
			t.Errorf("utpmesh %s: exit %d, want %d with %q\n%s%s", strings.Join(tc.args, " "), r.code, tc.code, tc.want, r.stdout, r.stderr)
		}
	}

	// An agent escalates (the demo mandate grants HEM-MANDATE-01); the operator decides.
	call := cm.must(t, 0, "call", "atp_invoke_hem", "--json", "--args", `{"booking_object_id":"`+id+`","hem_id":"HEM-MANDATE-01","context":{"trigger_reason":"MANDATE_GAP_DETECTED","agent_assessment":"need notify_traveller"}}`).stdout
	wantContains(t, "invoke", call, `"PENDING"`)
	cm.must(t, 1, "atp", "booking", "transition", id, "JOURNEY") // held by the escalation
	// The agent cannot approve its own escalation; an operator does.
	wantContains(t, "self-approval", cm.must(t, 1, "call", "atp_hem_confirm", "--args", `{"task_id":"x"}`).stderr, "auth_failed", "an operator runs it")
	svc := atptools.ServiceFor(filepath.Join(root, "utpmesh-data"))
	pending, err := svc.HEM().List(context.Background(), "demo", "PENDING")
	if err != nil || len(pending) != 1 || pending[0].Token == "" {
		t.Fatalf("pending tasks: %+v, %v", pending, err)
	}
	cm.must(t, 0, "hem", "confirm", pending[0].TaskID, "--token", pending[0].Token, "--note", "ok")
	if done, err := svc.HEM().List(context.Background(), "demo", "COMPLETE"); err != nil || len(done) != 1 || done[0].Operator != "operator" {
		t.Fatalf("operator confirm: %+v, %v", done, err)
	}
	// The demo mandate holds no operator action; the demo policy grants
	// them to operators.
	mand, err := os.ReadFile(filepath.Join(root, "utpmesh-data", "demo-mandate.jwt"))
	if err != nil {
		t.Fatal(err)
	}
	dm, err := mandate.Decode(strings.TrimSpace(string(mand)))
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"hem_list", "hem_confirm", "hem_decline"} {
		if strings.Contains(dm.Claims.Mandate.PolicySet, op) {
			t.Errorf("the demo mandate holds %s:\n%s", op, dm.Claims.Mandate.PolicySet)
		}
	}
	pol, err := cm.m.Auth().Store.Policies(context.Background(), "demo")
	if err != nil || !strings.Contains(pol.Policies, `permit(principal is Operator, action in [ATPAdminAction::"hem_confirm", ATPAdminAction::"hem_decline", ATPAdminAction::"hem_list"], resource in Project::"demo");`) {
		t.Fatalf("demo policy: %+v, %v", pol, err)
	}
	wantContains(t, "transition", cm.must(t, 0, "atp", "booking", "transition", id, "JOURNEY", "--reason", "arrived").stdout, "PRE_JOURNEY -> JOURNEY")
	wantContains(t, "events", cm.must(t, 0, "atp", "booking", "events", id).stdout, "BOOKING_CREATED", "HEM_INVOKED", "HEM_RESOLVED", "STATE_TRANSITION")
}

// TestUpServesATP runs 'utpmesh up' in process: it loads the ATP fixture
// into the demo project, and the demo mandate it writes calls the ATP
// tools, with the gate reading the booking's state.
func TestUpServesATP(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var errb syncBuffer
	done := make(chan int, 1)
	go func() {
		defer pw.Close()
		done <- run(ctx, []string{"up", "--data", dir, "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "", "--services", "atp,echo"},
			env{stdout: pw, stderr: &errb, getenv: func(string) string { return "" }})
	}()
	var url, bookingID string
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		l := sc.Text()
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "NATS" {
			url = f[1]
		}
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "atp        demo booking "); ok {
			bookingID, _, _ = strings.Cut(rest, " ")
			wantContains(t, "atp line", l, "(PRE_JOURNEY)", "utpmesh atp booking get "+bookingID)
		}
		if strings.HasPrefix(l, "Press Ctrl-C") {
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if url == "" || bookingID == "" {
		t.Fatalf("up printed no NATS URL or demo booking; stderr:\n%s", errb.String())
	}
	cm := &cliMesh{url: url}
	mand := filepath.Join(dir, "demo-mandate.jwt")
	creds := filepath.Join(dir, "creds", "admin.nk") // up's identities are on; the CLI runs elsewhere
	for _, tc := range []struct{ tool, args, want string }{
		{"atp_get_booking_status", `{"booking_object_id":"` + bookingID + `"}`, `"state": "PRE_JOURNEY"`},
		{"atp_get_context_package", `{"booking_object_id":"` + bookingID + `","fields":["payment"]}`, `"currency": "JPY"`},
		{"atp_collect_pre_arrangement_data", `{"booking_object_id":"` + bookingID + `","filter":"REQUIRED_OUTSTANDING"}`, `"boot_size_eu"`},
		{"atp_search_activities", `{"category":"SKI"}`, `"act-ski-lesson"`},
		{"atp_record_safety_check", `{"booking_object_id":"` + bookingID + `","check_type":"SKILL_ASSESSMENT","subject":"p-ben","outcome":"PASS","checked_by":"desk"}`, `"booking_object_status_unchanged": true`},
	} {
		wantContains(t, tc.tool, cm.must(t, 0, "call", tc.tool, "--mandate", mand, "--creds", creds, "--json", "--args", tc.args).stdout, tc.want)
	}
	wantContains(t, "events", cm.must(t, 0, "atp", "booking", "events", bookingID, "--mandate", mand, "--creds", creds).stdout, "SAFETY_CHECK")
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("up exited %d\n%s", code, errb.String())
	}
}

// TestATPRateLimitAcrossWorkerProcesses: a second ATP worker in its own
// process serves the same tools; the per-minute limit (60) holds for the
// client across both, because the counters live in the mesh's KV bucket.
func TestATPRateLimitAcrossWorkerProcesses(t *testing.T) {
	root := t.TempDir()
	cm := startATPMesh(t, root)
	child := startProc(t, "worker", "--nats", cm.url, "--data", filepath.Join(root, "worker-2"), "--log-level", "debug", "atp")
	child.waitLine(t, "worker serving")
	ctx := context.Background()
	key, err := cm.m.Auth().Keys.Load(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	// The window slides: a run that lasts a minute or more lets its first
	// calls leave it; then the run is repeated once with a fresh client.
	for attempt := 0; attempt < 2; attempt++ {
		agentID := fmt.Sprintf("busy-%d", attempt)
		tok, err := mandate.Issue(key, mandate.Claims{Subject: agentID, ExpiresAt: time.Now().Add(time.Hour).Unix(),
			Mandate: mandate.Grant{PolicySet: `permit(principal, action == ATPAction::"search_activities", resource);`}}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ag, err := agent.New(cm.m.Conn(), agent.Config{Project: "demo", AgentID: agentID, Mandate: tok})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ok := 0
		var limited *card.Error
		for i := 0; i < 200 && limited == nil; i++ {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			out, err := ag.Call(cctx, agent.CallRequest{ToolName: "atp_search_activities", Arguments: json.RawMessage(`{}`), AgentTurnID: fmt.Sprintf("rl-%d-%d", attempt, i)})
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case out.Result.Status == card.StatusSuccess:
				ok++
			case out.Result.Error != nil && out.Result.Error.Code == "rate_limited":
				limited = out.Result.Error
			default:
				t.Fatalf("call %d: %+v", i, out.Result)
			}
		}
		_ = ag.Close()
		if time.Since(start) >= time.Minute {
			continue // the first calls left the window during the run
		}
		if limited == nil || ok != 60 || !strings.Contains(string(limited.Detail), `"retry_after_seconds"`) {
			t.Fatalf("%d calls succeeded before the limit (want 60); limited: %+v", ok, limited)
		}
		child.mu.Lock()
		inChild := 0
		for _, l := range child.lines {
			if strings.Contains(l, "executing") && strings.Contains(l, agentID) {
				inChild++
			}
		}
		child.mu.Unlock()
		if inChild == 0 || inChild >= ok+1 {
			t.Fatalf("the second process executed %d of %d calls: both processes must have served some", inChild, ok+1)
		}
		return
	}
	t.Fatal("two runs crossed a minute boundary")
}
