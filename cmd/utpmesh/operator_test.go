package main

import (
	"bufio"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// startUp runs 'utpmesh up' in process in root with its default --data
// (./utpmesh-data, so the CLI finds its identities as next to a local
// 'up') serving services; it returns the mesh's URL and the demo booking
// of ATP's fixture. The mesh stops when the test ends.
func startUp(t *testing.T, root, services string) (url, bookingID string) {
	t.Helper()
	t.Chdir(root)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var errb syncBuffer
	done := make(chan int, 1)
	go func() {
		defer pw.Close()
		done <- run(ctx, []string{"up", "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "", "--services", services},
			env{stdout: pw, stderr: &errb, getenv: func(string) string { return "" }})
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("up exited %d\n%s", code, errb.String())
		}
	})
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		l := sc.Text()
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "NATS" {
			url = f[1]
		}
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "atp        demo booking "); ok {
			bookingID, _, _ = strings.Cut(rest, " ")
		}
		if strings.HasPrefix(l, "Press Ctrl-C") {
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if url == "" || bookingID == "" {
		t.Fatalf("up printed no NATS URL or demo booking; stderr:\n%s", errb.String())
	}
	return url, bookingID
}

// TestHEMAsOperator: against a real 'utpmesh up' (identities and the gate
// on), 'utpmesh hem ls|confirm|decline' with the operator identity
// (operator.nk, found as next to a local 'up') decide the agent's HEM
// escalations, recorded as confirmed_by/declined_by "operator" with the
// operator's name; with an agent's credentials the mesh refuses them
// (auth_failed operator_only), and the admin's are refused by the CLI,
// which names operator.nk.
func TestHEMAsOperator(t *testing.T) {
	root := t.TempDir()
	url, booking := startUp(t, root, "atp,echo")
	cm := &cliMesh{url: url}
	dir := filepath.Join(root, "utpmesh-data")
	agentCreds := filepath.Join(dir, "creds", "agent-demo.nk")
	adminCreds := filepath.Join(dir, "creds", "admin.nk")
	invoke := func(t *testing.T) string {
		t.Helper()
		out := decodeJSON[struct {
			Result map[string]any `json:"result"`
		}](t, cm.must(t, 0, "call", "atp_invoke_hem", "--creds", agentCreds, "--json", "--args",
			`{"booking_object_id":"`+booking+`","hem_id":"HEM-MANDATE-01","context":{"trigger_reason":"MANDATE_GAP_DETECTED","agent_assessment":"need notify_traveller"}}`).stdout).Result
		id, _ := out["task_id"].(string)
		if out["status"] != "PENDING" || id == "" {
			t.Fatalf("atp_invoke_hem: %v", out)
		}
		return id
	}
	type task struct {
		TaskID     string `json:"task_id"`
		Status     string `json:"status"`
		Token      string `json:"human_confirmation_token"`
		ResolvedBy string `json:"resolved_by"`
		Operator   string `json:"operator"`
	}
	list := func(t *testing.T, status string) []task {
		t.Helper()
		return decodeJSON[struct {
			Tasks []task `json:"tasks"`
		}](t, cm.must(t, 0, "hem", "ls", "--status", status, "--json").stdout).Tasks
	}

	first := invoke(t)
	// Who may decide: not an agent, not the admin key.
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"agent creds", []string{"hem", "ls", "--creds", agentCreds}, 1, []string{"auth_failed", "operator only", "--creds " + filepath.Join(dir, "creds", "operator.nk")}},
		{"agent creds confirm", []string{"hem", "confirm", first, "--creds", agentCreds}, 1, []string{"auth_failed", "operator only"}},
		{"admin creds", []string{"hem", "decline", first, "--reason", "r", "--creds", adminCreds}, 2, []string{"not an operator's identity", "--creds " + filepath.Join(dir, "creds", "operator.nk")}},
		{"agent call", []string{"call", "atp_hem_confirm", "--creds", agentCreds, "--args", `{"task_id":"` + first + `"}`}, 1, []string{"auth_failed", "an operator runs it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cm.must(t, tc.code, tc.args...)
			wantContains(t, tc.name, r.stderr, tc.want...)
		})
	}

	// The operator lists and confirms.
	pending := list(t, "PENDING")
	if len(pending) != 1 || pending[0].TaskID != first || pending[0].Token == "" {
		t.Fatalf("hem ls --status PENDING = %+v", pending)
	}
	wantContains(t, "hem ls", cm.must(t, 0, "hem", "ls").stdout, first, "PENDING")
	got := decodeJSON[map[string]any](t, cm.must(t, 0, "hem", "confirm", first, "--token", pending[0].Token, "--note", "ok", "--json").stdout)
	if got["status"] != "COMPLETE" || got["confirmed_by"] != "operator" {
		t.Fatalf("hem confirm: %v", got)
	}
	// ... and declines the next one.
	second := invoke(t)
	wantContains(t, "hem decline", cm.must(t, 0, "hem", "decline", second, "--reason", "not now").stdout, "task "+second+": DECLINED")
	for _, tc := range []struct{ status, id string }{{"COMPLETE", first}, {"DECLINED", second}} {
		ts := list(t, tc.status)
		if len(ts) != 1 || ts[0].TaskID != tc.id || ts[0].ResolvedBy != "operator" || ts[0].Operator != "operator" {
			t.Fatalf("hem ls --status %s = %+v, want %s decided by the operator named operator", tc.status, ts, tc.id)
		}
	}
	wantContains(t, "events", cm.must(t, 0, "atp", "booking", "events", booking, "--creds", adminCreds).stdout, "operator:operator")

	// A structured mandate-gap escalation: hem ls prompts with the exact
	// Cedar action; confirming needs the parent mandate and then issues
	// the sub-mandate.
	out := decodeJSON[struct {
		Result map[string]any `json:"result"`
	}](t, cm.must(t, 0, "call", "atp_invoke_hem", "--creds", agentCreds, "--json", "--args",
		`{"booking_object_id":"`+booking+`","hem_id":"HEM-MANDATE-01","context":{"trigger_reason":"MANDATE_GAP_DETECTED","agent_assessment":"tell the guests","requested_action":"ATPAction::\"notify_traveller\""}}`).stdout).Result
	gap, _ := out["task_id"].(string)
	wantContains(t, "hem ls", cm.must(t, 0, "hem", "ls", "--status", "PENDING").stdout, gap+`: HEM-MANDATE-01 mandate gap: agent demo-agent asks for ATPAction::"notify_traveller"`)
	token := list(t, "PENDING")[0].Token
	wantContains(t, "hem confirm without a parent", cm.must(t, 1, "hem", "confirm", gap, "--token", token).stderr, "--parent-mandate FILE")
	wantContains(t, "hem confirm", cm.must(t, 0, "hem", "confirm", gap, "--token", token, "--parent-mandate", filepath.Join(dir, "demo-mandate.jwt")).stdout,
		"COMPLETE", "by operator operator", "sub-mandate", "delivered to the agent's turn")
}

// TestMCPOperatorHandoff: 'utpmesh mcp --operator-creds operator.nk'
// against a real 'up': the agent's atp_invoke_hem waits for an operator,
// the host's human is asked (the session's mandate is the demo agent's,
// which holds no operator action) and its confirmation decides the HEM as
// the operator; credentials that are not an operator's, or --listen, are
// refused.
func TestMCPOperatorHandoff(t *testing.T) {
	root := t.TempDir()
	url, booking := startUp(t, root, "atp,echo")
	cm := &cliMesh{url: url}
	dir := filepath.Join(root, "utpmesh-data")
	agentCreds := filepath.Join(dir, "creds", "agent-demo.nk")
	opCreds := filepath.Join(dir, "creds", "operator.nk")
	getenv := func(k string) string {
		if k == "NATS_URL" {
			return url
		}
		return ""
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mcp", "--operator-creds", filepath.Join(dir, "creds", "admin.nk")}, "not an operator's identity"},
		{[]string{"mcp", "--operator-creds", agentCreds}, "--operator-creds " + opCreds},
		{[]string{"mcp", "--operator-creds", opCreds, "--listen", "127.0.0.1:0"}, "--operator-creds is for stdio"},
	} {
		wantContains(t, strings.Join(tc.args, " "), cm.must(t, 2, tc.args...).stderr, tc.want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	var stderr lockedBuffer
	cmd := &mcpCommand{env: env{stdout: sw, stderr: &stderr, getenv: getenv}, stdin: sr}
	done := make(chan error, 1)
	go func() { done <- cmd.Run(ctx, []string{"--creds", agentCreds, "--operator-creds", opCreds}) }()
	var asked []string
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "operator-test", Version: "1"}, &sdk.ClientOptions{
		ElicitationHandler: func(_ context.Context, r *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			asked = append(asked, r.Params.Message)
			return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}}, nil
		}}).Connect(ctx, &sdk.IOTransport{Reader: cr, Writer: cw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "atp_invoke_hem", Arguments: map[string]any{"booking_object_id": booking, "hem_id": "HEM-MANDATE-01",
		"context": map[string]any{"trigger_reason": "MANDATE_GAP_DETECTED", "agent_assessment": "need notify_traveller"}}})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := res.StructuredContent.(map[string]any)
	if res.IsError || s["status"] != "COMPLETE" || s["confirmed_by"] != "operator" || len(asked) != 1 || !strings.Contains(asked[0], "asks an operator to confirm HEM task") {
		t.Fatalf("atp_invoke_hem through the operator's bridge: isError %v, structured %v, content %+v, asked %q", res.IsError, s, res.Content, asked)
	}
	_ = cs.Close()
	_ = cw.Close()
	if err := <-done; err != nil {
		t.Fatalf("mcp: %v\n%s", err, stderr.String())
	}
	wantContains(t, "stderr", stderr.String(), "as operator operator")
	ts := decodeJSON[struct {
		Tasks []struct {
			ResolvedBy string `json:"resolved_by"`
			Operator   string `json:"operator"`
		} `json:"tasks"`
	}](t, cm.must(t, 0, "hem", "ls", "--status", "COMPLETE", "--json").stdout).Tasks
	if len(ts) != 1 || ts[0].ResolvedBy != "operator" || ts[0].Operator != "operator" {
		t.Fatalf("completed HEM tasks = %+v, want one decided by the operator named operator", ts)
	}
}
