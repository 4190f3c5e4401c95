package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/internal/gomodtest"
	"github.com/utpmesh/utpmesh/pkg/admit"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// tsSDKDir is the TypeScript SDK with its dependencies installed, or the
// test skips saying how to install them (make test does: npm ci from the
// committed lockfile).
func tsSDKDir(t *testing.T) string {
	t.Helper()
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not on PATH: the TypeScript SDK test needs Node.js 20 or later and npm", bin)
		}
	}
	dir := filepath.Join(gomodtest.Root(t), "pkg", "sdk", "typescript")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@nats-io", "transport-node")); err != nil {
		t.Skipf("the TypeScript SDK's dependencies are not installed; install them with: make ts-sdk (npm ci --prefix %s)", dir)
	}
	return dir
}

// guideTS is part C of the guide (write-a-tool-service.md): its blocks
// marked <!-- guide-ts: KIND [ARG] -->.
func guideTS(t *testing.T) []guideBlock {
	t.Helper()
	b, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	out := markedBlocks(t, string(b), regexp.MustCompile(`^<!-- guide-ts: (\S+)(?: (\S+))? -->$`))
	if len(out) == 0 {
		t.Fatalf("guide: part C's blocks are missing")
	}
	return out
}

// TestTypeScriptSDK runs the TypeScript SDK against a real `utpmesh up`:
// part C of the guide as written (the examples are the package's files;
// build, identity, serve, status, policy, mandate, the TS agent calling
// the TS tool), then the Go agent SDK calling the TS tool, commands the
// mesh did not admit refused by the TS worker, the SDK's own tests (node
// --test: the agent against the Go echo worker, wakeups, resume after a
// restart, a refused call, timeout, cancel, drain, a killed TS worker's
// call taken over; the TS worker's issue-27 rules: no report when
// put_result stored the inbox entry, a command whose tool.call card is
// missing retried until its third delivery; ATP's Windley loop: a session bound to a booking
// re-querying on another agent's transition and refusing the tool the new
// residual forbids, a mandate gap approved with `utpmesh hem confirm`; a
// per-agent identity's round trip and its refusals), the describe endpoint, the TS worker's counters in
// status, and its drain on SIGTERM. The clone is a temporary directory whose pkg/sdk/typescript
// links to this tree's (npm run build writes dist/ there).
func TestTypeScriptSDK(t *testing.T) {
	sdk := tsSDKDir(t)
	repo := gomodtest.Root(t)
	blocks := guideTS(t)
	clone := filepath.Join(t.TempDir(), "utpmesh")
	if err := os.MkdirAll(filepath.Join(clone, "pkg", "sdk"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sdk, filepath.Join(clone, "pkg", "sdk", "typescript")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(clone)

	var up, tool *proc
	var url, last string
	cli := func(t *testing.T, args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		code := run(ctx, args, env{stdout: &stdout, stderr: &stderr, getenv: func(k string) string {
			if k == "NATS_URL" {
				return url
			}
			return ""
		}})
		if code != 0 {
			t.Fatalf("utpmesh %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	node := func(t *testing.T, dir string, extra []string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", args...)
		cmd.Dir, cmd.Env = dir, guideEnv(append([]string{"NATS_URL=" + url}, extra...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("node %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return stdout.String()
	}

	for _, b := range blocks {
		switch b.kind {
		case "file":
			src, err := os.ReadFile(filepath.Join(repo, b.arg))
			if err != nil || string(src) != b.text() {
				t.Fatalf("the guide's copy of %s differs from the file (%v): update the guide's block", b.arg, err)
			}
		case "write":
			gomodtest.Write(t, clone, map[string]string{b.arg: b.text()})
		case "output":
			got := strings.Split(strings.TrimRight(last, "\n"), "\n")
			for _, l := range b.lines {
				re := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(l), "…", ".+") + "$")
				found := false
				for _, g := range got {
					found = found || re.MatchString(g)
				}
				if !found {
					t.Fatalf("the last step printed:\n%s\nthe guide shows the line %q", last, l)
				}
			}
		case "run":
			for _, line := range b.lines {
				w := shellWords(t, line)
				if len(w) == 0 {
					continue
				}
				redirect, appendTo := "", false
				if n := len(w); n >= 3 && (w[n-2] == ">" || w[n-2] == ">>") {
					redirect, appendTo, w = filepath.Join(clone, w[n-1]), w[n-2] == ">>", w[:n-2]
				}
				var out []byte
				switch {
				case strings.Join(w, " ") == "go run ./cmd/utpmesh up":
					up = startIn(t, clone, guideEnv("UTPMESH_TEST_EXEC=1"), utpmeshBin(),
						"up", "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "")
					up.waitLine(t, "Press Ctrl-C")
					m := regexp.MustCompile(`(?m)^\s+NATS\s+(nats://\S+)`).FindStringSubmatch(up.output())
					if m == nil {
						t.Fatalf("up printed no NATS URL:\n%s", up.output())
					}
					url = m[1]
				case len(w) > 3 && strings.Join(w[:3], " ") == "go run ./cmd/utpmesh":
					out = []byte(cli(t, w[3:]...))
				case len(w) == 4 && w[0] == "npm" && w[1] == "ci" && w[2] == "--prefix":
					// make test ran it (make ts-sdk); tsSDKDir checked the result.
				case len(w) == 5 && w[0] == "npm" && w[1] == "run" && w[3] == "--prefix":
					cmd := exec.Command("npm", w[1:]...)
					cmd.Dir = clone
					if b, err := cmd.CombinedOutput(); err != nil {
						t.Fatalf("guide step %q: %v\n%s", line, err, b)
					}
				case w[0] == "cat" && len(w) == 2:
					data, err := os.ReadFile(filepath.Join(clone, w[1]))
					if err != nil {
						t.Fatalf("guide step %q: %v", line, err)
					}
					out = data
				case w[0] == "node" && len(w) > 1 && filepath.Base(w[1]) == "tool.js":
					tool = startIn(t, clone, guideEnv("NATS_URL="+url), "node", w[1:]...)
					tool.waitLine(t, "worker serving")
				case w[0] == "node":
					out = []byte(node(t, clone, nil, w[1:]...))
				default:
					t.Fatalf("guide step %q: the test does not know how to run it; use the commands it knows or teach it", line)
				}
				if redirect != "" {
					flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
					if appendTo {
						flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
					}
					if err := appendFile(redirect, flags, out); err != nil {
						t.Fatal(err)
					}
				} else if out != nil {
					last = string(out)
				}
			}
		default:
			t.Fatalf("guide: unknown part C marker kind %q", b.kind)
		}
	}
	if up == nil || tool == nil {
		t.Fatalf("part C of the guide starts no up (%v) or no tool (%v)", up != nil, tool != nil)
	}
	data := filepath.Join(clone, "utpmesh-data")
	connect := func(t *testing.T, name string) *nats.Conn {
		t.Helper()
		opt, err := creds.Option(filepath.Join(data, "creds", name+".nk"))
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(url, opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	ctx := context.Background()

	t.Run("the Go agent SDK calls the TS tool", func(t *testing.T) {
		tok, err := os.ReadFile(filepath.Join(clone, "reverse.jwt"))
		if err != nil {
			t.Fatal(err)
		}
		ac, err := agent.New(connect(t, "agent-demo"), agent.Config{Project: "demo", AgentID: "reverse-agent", Mandate: strings.TrimSpace(string(tok))})
		if err != nil {
			t.Fatal(err)
		}
		defer ac.Close()
		var got string
		if _, err := ac.CallInto(ctx, agent.CallRequest{ToolName: "reverse", AgentTurnID: "go-turn", Arguments: json.RawMessage(`{"text":"drawer"}`)}, &got); err != nil {
			t.Fatal(err)
		}
		if got != "reward" {
			t.Fatalf("reverse(drawer) = %q", got)
		}
	})

	t.Run("the TS worker refuses what the mesh did not admit", func(t *testing.T) {
		forgedCommands(t, connect(t, "admin"), data, func(raw bool) {
			mode := "admitted"
			if raw {
				mode = "raw"
			}
			cli(t, "policy", "config", "--project", "demo", "--commands", mode)
		})
	})

	t.Run("the SDK's own tests", func(t *testing.T) {
		// Two more tools for the in-process worker of the tests: their
		// identity, their entries (a policy names a tool's action only once
		// it is registered), a policy and a mandate of agent ts-agent.
		yaml := `tools:
  - tool_name: ts_slow
    parameters: {type: object, properties: {ms: {type: integer, minimum: 0}}, required: [ms]}
    target_subject: cg.{ver}.{project_id}.{channel_id}.cmd.tool.ts_slow
    after_execution: suspend
    options: {timeout_seconds: 1}
  - tool_name: ts_hold
    parameters: {type: object, properties: {ms: {type: integer, minimum: 0}}, required: [ms]}
    target_subject: cg.{ver}.{project_id}.{channel_id}.cmd.tool.ts_hold
    after_execution: suspend
    options: {timeout_seconds: 60}
`
		policy := `permit(principal, action in [Action::"reverse", Action::"ts_slow", Action::"ts_hold"], resource in Project::"demo");` + "\n"
		gomodtest.Write(t, clone, map[string]string{"ts.yaml": yaml, "ts.cedar": policy})
		cli(t, "identity", "add", "worker", "tsslow", "--tools", "ts_slow,ts_hold")
		cli(t, "tools", "import", "--project", "demo", "ts.yaml")
		cur := cli(t, "policy", "get", "--project", "demo")
		gomodtest.Write(t, clone, map[string]string{"all.cedar": cur + policy})
		cli(t, "policy", "put", "--project", "demo", "--yes", "all.cedar")
		gomodtest.Write(t, clone, map[string]string{"ts.jwt": cli(t, "mandate", "issue", "--project", "demo", "--agent", "ts-agent", "--policy", "ts.cedar")})
		// The Windley loop's session (test/loops.test.ts): a fresh booking
		// in PRE_JOURNEY and a mandate of agent ts-loop bound to it; and a
		// per-agent identity, ts-alice, with a mandate for echo.
		newBooking := func() string {
			var created struct {
				ID string `json:"booking_object_id"`
			}
			if err := json.Unmarshal([]byte(cli(t, "atp", "booking", "create", "--fixture", "--advance-to", "CONFIRMED", "--json")), &created); err != nil || created.ID == "" {
				t.Fatalf("atp booking create: %+v, %v", created, err)
			}
			return created.ID
		}
		bound, gapBooking := newBooking(), newBooking()
		// The mandate gap (docs/catalogues/atp.md, loop 2): demo-agent's
		// mandate narrowed from the demo mandate, without
		// update_pre_arrangement; the operator's approval (utpmesh hem,
		// run by the node test) issues the sub-mandate.
		guest := `permit(principal == Agent::"demo-agent", action in [ATPAction::"get_booking_status", ATPAction::"get_context_package"], resource in Project::"demo");
permit(principal == Agent::"demo-agent", action == ATPAction::"invoke_hem", resource in Project::"demo")
when { ["HEM-MANDATE-01"].contains(context.hem_id) };
`
		gomodtest.Write(t, clone, map[string]string{"guest.cedar": guest})
		gomodtest.Write(t, clone, map[string]string{"guest.jwt": cli(t, "mandate", "narrow", "--parent", filepath.Join(data, "demo-mandate.jwt"),
			"--policy", "guest.cedar", "--booking", gapBooking, "--ttl", "4h")})
		loop := `permit(principal, action == ATPAction::"get_booking_status", resource);
permit(principal, action == ATPAction::"update_pre_arrangement", resource) when { context.booking_state == "PRE_JOURNEY" };
`
		gomodtest.Write(t, clone, map[string]string{"loop.cedar": loop, "alice.cedar": `permit(principal, action == Action::"echo", resource in Project::"demo");` + "\n"})
		gomodtest.Write(t, clone, map[string]string{
			"loop.jwt":  cli(t, "mandate", "issue", "--project", "demo", "--agent", "ts-loop", "--policy", "loop.cedar", "--booking", bound),
			"alice.jwt": cli(t, "mandate", "issue", "--project", "demo", "--agent", "ts-alice", "--policy", "alice.cedar"),
		})
		cli(t, "identity", "add", "agent", "demo/ts-alice")
		out := node(t, sdk, []string{"UTPMESH_TS_DATA=" + data, "UTPMESH_TS_MANDATE=" + filepath.Join(clone, "ts.jwt"),
			"UTPMESH_TS_BOOKING=" + bound, "UTPMESH_TS_LOOP_MANDATE=" + filepath.Join(clone, "loop.jwt"), "UTPMESH_TS_ALICE_MANDATE=" + filepath.Join(clone, "alice.jwt"),
			"UTPMESH_TS_GAP_BOOKING=" + gapBooking, "UTPMESH_TS_GAP_MANDATE=" + filepath.Join(clone, "guest.jwt"),
			"UTPMESH_TS_CLI=" + utpmeshBin(), "UTPMESH_TS_CLI_DIR=" + clone},
			"--test", "dist/test/unit.test.js", "dist/test/mesh.test.js", "dist/test/loops.test.js")
		if !strings.Contains(out, "\n# fail 0") || strings.Contains(out, "# SKIP") || !strings.Contains(out, "- against a mesh\n") ||
			!strings.Contains(out, "- ATP's Windley loop against a mesh\n") || !strings.Contains(out, "- a per-agent identity against a mesh\n") ||
			!strings.Contains(out, "- resent requests\n") || !strings.Contains(out, "- the worker's result and missing-card rules\n") {
			t.Fatalf("node --test:\n%s", out)
		}
		t.Logf("node --test: %s", out[strings.LastIndex(out, "# tests"):])
	})

	t.Run("the TS worker describes its tool", func(t *testing.T) {
		nc := connect(t, "agent-demo")
		m, err := nc.Request("cg.v1r3.demo.main.svc.worker.reverse", nil, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Instance string `json:"instance"`
			Entry    struct {
				ToolName      string `json:"tool_name"`
				TargetSubject string `json:"target_subject"`
			} `json:"entry"`
		}
		if err := json.Unmarshal(m.Data, &d); err != nil || d.Instance == "" || d.Entry.ToolName != "reverse" ||
			d.Entry.TargetSubject != "cg.{ver}.{project_id}.{channel_id}.cmd.tool.reverse" {
			t.Fatalf("describe reverse: %s (%v)", m.Data, err)
		}
		// An agent of demo may not ask in another project; the admin may.
		m, err = connect(t, "admin").Request("cg.v1r3.nope.main.svc.worker.reverse", nil, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get("Svc-Error-Code") != "not_found" || !strings.Contains(string(m.Data), "not registered in project nope") {
			t.Fatalf("describe reverse in project nope: %v %s", m.Header, m.Data)
		}
	})

	t.Run("status counts the TS worker's calls", func(t *testing.T) {
		var rep statusReport
		if err := json.Unmarshal([]byte(cli(t, "status", "--json")), &rep); err != nil {
			t.Fatal(err)
		}
		var rev *toolStatus
		for i := range rep.Tools {
			if rep.Tools[i].Tool == "reverse" {
				rev = &rep.Tools[i]
			}
		}
		// Results the TS worker wrote: the guide's call, the Go agent's,
		// the SDK tests' success and bad arguments (their repeated call is
		// answered from the inbox), the five unadmitted commands.
		if rev == nil || rev.Workers != 1 || rev.Calls != 9 || rev.Failed != 6 || rev.InFlight != 0 {
			t.Fatalf("status: reverse = %+v, want 1 worker, 9 calls, 6 failed", rev)
		}
	})

	if err := tool.stopWith(t, syscall.SIGTERM); err != nil {
		t.Fatalf("the TS tool after SIGTERM: %v, want exit 0\n%s", err, tool.output())
	}
	if err := up.stopWith(t, os.Interrupt); err != nil {
		t.Fatalf("up after Ctrl-C: %v\n%s", err, up.output())
	}
}

// forgedCommands publishes, as admin (the one identity besides the core
// that may publish tool commands), commands for the TS tool reverse that
// the mesh did not admit, and checks that each ends failed/auth_failed
// without running: no CG-Admission, a signature by another key under the
// mesh's key id, the mesh's signature of another call (a replay), and
// the mesh's signature of the call with other card content; and a command
// without CG-Admission in a project that accepts raw commands (setRaw
// switches demo's mode), which the TS worker, running no Cedar gate,
// refuses too.
func forgedCommands(t *testing.T, nc *nats.Conn, dataDir string, setRaw func(bool)) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key, err := admit.LoadOrCreateKey(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := natsstore.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const agentID, turn = "forger", "forged-turn"
	wakeSubj, err := subjects.AgentWakeup(subjects.DefaultVersion, "demo", "main", agentID)
	if err != nil {
		t.Fatal(err)
	}
	wakes := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(wakeSubj.String(), wakes)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	target := "cg.v1r3.demo.main.cmd.tool.reverse"
	other, err := key.Sign(utp.Admission{Subject: target, AgentID: agentID, AgentTurnID: turn, TurnEpoch: 0, ToolCallID: "another-call",
		ToolCallCardID: card.NewID(), ToolName: "reverse", AfterExecution: card.Suspend, Principal: "agent:" + agentID, CardSHA256: "00"})
	if err != nil {
		t.Fatal(err)
	}
	_, foreign, _ := ed25519Pair()
	tests := []struct {
		name   string
		raw    bool
		header func(a utp.Admission) string
		want   string
	}{
		// The TS worker reads the project's mode when it refuses a command.
		{"raw-mode project", true, func(utp.Admission) string { return "" }, "runs no Cedar gate"},
		{"no header", false, func(utp.Admission) string { return "" }, "has no CG-Admission header"},
		{"another key", false, func(a utp.Admission) string {
			a.KeyID = key.KeyID
			h, _ := utp.SignAdmission(foreign, a)
			return h
		}, "does not verify"},
		{"another call's admission", false, func(utp.Admission) string { return other }, "differs from the admitted"},
		{"other card content", false, func(a utp.Admission) string {
			a.CardSHA256 = utp.ContentSHA256([]byte(`{"tool_name":"reverse","arguments":{"text":"admitted"}}`))
			h, _ := key.Sign(a)
			return h
		}, "is not the admitted one"},
	}
	raw := false
	for i, tc := range tests {
		if tc.raw != raw {
			setRaw(tc.raw)
			raw = tc.raw
		}
		call := "forged-" + string(rune('a'+i))
		content, _ := json.Marshal(card.ToolCallContent{ToolName: "reverse", Arguments: json.RawMessage(`{"text":"forged"}`), TargetSubject: target})
		cc := &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: card.TypeToolCall, AuthorID: agentID, Content: content, ToolCallID: call,
			CreatedAt: time.Now().UTC(), Metadata: card.Metadata{AgentID: agentID, AgentTurnID: turn, StepID: "s", ToolCallID: call}}
		if err := st.Put(ctx, cc); err != nil {
			t.Fatal(err)
		}
		cmd := utp.Command{AgentID: agentID, AgentTurnID: turn, ToolCallID: call, AfterExecution: card.Suspend, ToolCallCardID: cc.CardID, StepID: "s", ToolName: "reverse"}
		body, _ := json.Marshal(cmd)
		m := nats.NewMsg(target)
		m.Data = body
		if h := tc.header(utp.Admission{Subject: target, AgentID: agentID, AgentTurnID: turn, ToolCallID: call, ToolCallCardID: cc.CardID,
			ToolName: "reverse", AfterExecution: card.Suspend, Principal: "agent:" + agentID, CardSHA256: utp.ContentSHA256(content)}); h != "" {
			m.Header.Set(utp.HeaderAdmission, h)
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
		var wk utp.Wakeup
		select {
		case msg := <-wakes:
			if err := json.Unmarshal(msg.Data, &wk); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("%s: no wakeup: the command was not answered", tc.name)
		}
		rc, err := st.Get(ctx, "demo", wk.ToolResultCardID)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := rc.ToolResult()
		if err != nil {
			t.Fatal(err)
		}
		if wk.ToolCallID != call || tr.Status != card.StatusFailed || tr.Error == nil || tr.Error.Code != card.CodeAuthFailed ||
			!strings.Contains(tr.Error.Message, "not admitted by the mesh") || !strings.Contains(tr.Error.Message, tc.want) {
			t.Fatalf("%s: call %s ended %s %+v, want failed auth_failed %q", tc.name, wk.ToolCallID, tr.Status, tr.Error, tc.want)
		}
	}
}

// ed25519Pair makes a key pair that is none of the mesh's.
func ed25519Pair() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	return ed25519.GenerateKey(rand.Reader)
}

// appendFile writes data to path opened with flags (a shell redirect).
func appendFile(path string, flags int, data []byte) error {
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}
