package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/apps/webui"
)

// TestUIEscalationsBrowser drives the web UI's /escalations page in a
// real headless Chromium against a real 'utpmesh up' (identities and the
// gate on): the agent's pending HEM tasks are listed with their deadline
// and confirmation prompt (a mandate gap's exact Cedar action), the
// operator declines one with a reason and confirms the other (a mandate
// expansion, which issues a sub-mandate), and each decision page names
// the operator who decided. The UI reads as the agent identity and
// decides as the operator identity (--operator-creds).
func TestUIEscalationsBrowser(t *testing.T) {
	browser := chromium(t)
	root := t.TempDir()
	url, booking := startUp(t, root, "atp,echo")
	cm := &cliMesh{url: url}
	dir := filepath.Join(root, "utpmesh-data")
	agentCreds := filepath.Join(dir, "creds", "agent-demo.nk")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	invoke := func(t *testing.T, context string) string {
		t.Helper()
		out := decodeJSON[struct {
			Result map[string]any `json:"result"`
		}](t, cm.must(t, 0, "call", "atp_invoke_hem", "--creds", agentCreds, "--json", "--args",
			`{"booking_object_id":"`+booking+`","hem_id":"HEM-MANDATE-01","context":`+context+`}`).stdout).Result
		id, _ := out["task_id"].(string)
		if out["status"] != "PENDING" || id == "" {
			t.Fatalf("atp_invoke_hem: %v", out)
		}
		return id
	}
	plain := invoke(t, `{"trigger_reason":"MANDATE_GAP_DETECTED","agent_assessment":"need to tell the guests"}`)
	gap := invoke(t, `{"trigger_reason":"MANDATE_GAP_DETECTED","agent_assessment":"the guests must hear of the new meeting point","requested_action":"ATPAction::\"notify_traveller\"","resource_condition":"resource == Booking::\"`+booking+`\""}`)

	ag, err := connectAs(t, url, agentCreds)
	if err != nil {
		t.Fatal(err)
	}
	op, err := connectAs(t, url, filepath.Join(dir, "creds", "operator.nk"))
	if err != nil {
		t.Fatal(err)
	}
	opc, err := agent.New(op.nc, agent.Config{Project: "demo", Operator: "operator", Logger: atlasQuietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer opc.Close()
	call := func(ctx context.Context, tool string, args json.RawMessage) (*agent.Outcome, error) {
		return opc.Call(ctx, agent.CallRequest{ToolName: tool, Arguments: args, AgentTurnID: "ui-operator"})
	}
	demo, err := os.ReadFile(filepath.Join(dir, "demo-mandate.jwt"))
	if err != nil {
		t.Fatal(err)
	}
	u, stop, err := startUI(ctx, ag.nc, uiConfig{Listen: "127.0.0.1:0", Mandate: strings.TrimSpace(string(demo)), Logger: atlasQuietLog,
		Operator: webui.OperatorCall(call)})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatalf("start %s: %v", browser, err)
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, scancel := context.WithTimeout(bctx, 20*time.Second)
		defer scancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			html, _ := chromedp.Run(bctx, chromedp.OuterHTML(`body`))
			t.Fatalf("browser: %s: %v\n%s", what, err, html)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	row := func(id string) string { return `tr.escalation[data-escalation="` + id + `"]` }

	do("open the UI, then the escalations", chromedp.Navigate(u), chromedp.WaitVisible(`#nav-escalations`),
		chromedp.Click(`#nav-escalations`), chromedp.WaitVisible(row(plain)), chromedp.WaitVisible(row(gap)))
	if dl := text(row(gap) + ` td.deadline`); !strings.HasPrefix(dl, time.Now().UTC().Format("2006-")) {
		t.Fatalf("deadline cell %q", dl)
	}
	if p := text(row(gap) + ` td.prompt`); !strings.Contains(p, `asks for ATPAction::"notify_traveller" on resource == Booking::"`+booking+`"`) {
		t.Fatalf("the mandate gap's prompt %q lacks the Cedar action and resource condition", p)
	}

	do("decline the plain task with a reason", chromedp.SendKeys(row(plain)+` input.reason`, "not for this guest"),
		chromedp.Click(row(plain)+` button.decline-btn`), chromedp.WaitVisible(`#decision`))
	if d, by := text(`#decision`), text(`#decided-by`); !strings.HasPrefix(d, "DECLINED") || by != "operator" {
		t.Fatalf("decline page: %q by %q", d, by)
	}
	do("back to the escalations", chromedp.Click(`#back`), chromedp.WaitVisible(row(gap)))
	if n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('tr.escalation[data-escalation="`+plain+`"]').length`)); err != nil || n != 0 {
		t.Fatalf("the declined task is still listed (%d, %v)", n, err)
	}
	do("confirm the mandate gap", chromedp.Click(row(gap)+` button.confirm-btn`), chromedp.WaitVisible(`#decision-summary`))
	if d, by, sum := text(`#decision`), text(`#decided-by`), text(`#decision-summary`); !strings.HasPrefix(d, "COMPLETE") || by != "operator" || !strings.Contains(sum, "sub-mandate") {
		t.Fatalf("confirm page: %q by %q: %q", d, by, sum)
	}

	// The tasks say who decided, as the seed's poll output does.
	for _, tc := range []struct{ status, id, field string }{{"DECLINED", plain, "reason"}, {"COMPLETE", gap, "grant"}} {
		tasks := decodeJSON[struct {
			Tasks []map[string]any `json:"tasks"`
		}](t, cm.must(t, 0, "hem", "ls", "--status", tc.status, "--json").stdout).Tasks
		if len(tasks) != 1 || tasks[0]["task_id"] != tc.id || tasks[0]["operator"] != "operator" || tasks[0]["resolved_by"] != "operator" || tasks[0][tc.field] == nil {
			t.Fatalf("%s tasks = %v", tc.status, tasks)
		}
	}
}
