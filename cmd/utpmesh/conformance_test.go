package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/gomodtest"
	"github.com/utpmesh/utpmesh/pkg/conformance"
)

// conformanceMesh starts a real 'utpmesh up' in a temporary directory and
// prepares what the kit needs: the probe's worker identity, its entry
// (registered before the policy names it), a policy and a mandate of the
// kit's agent that permit the probe and cancel_tool_call. It returns the
// directory, the NATS URL, a function that runs the CLI in process, and
// one that runs the kit's tool cases with extra flags (as the kit's agent,
// with admin.nk for the unadmitted commands).
func conformanceMesh(t *testing.T) (dir, url string, cli, kit func(t *testing.T, extra ...string) (stdout, stderr string, code int)) {
	t.Helper()
	dir = t.TempDir()
	up := startIn(t, dir, guideEnv("UTPMESH_TEST_EXEC=1"), utpmeshBin(),
		"up", "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "", "--services", "echo")
	up.waitLine(t, "Press Ctrl-C")
	m := regexp.MustCompile(`(?m)^\s+NATS\s+(nats://\S+)`).FindStringSubmatch(up.output())
	if m == nil {
		t.Fatalf("up printed no NATS URL:\n%s", up.output())
	}
	url = m[1]
	t.Cleanup(func() {
		if err := up.stopWith(t, os.Interrupt); err != nil {
			t.Errorf("up after Ctrl-C: %v\n%s", err, up.output())
		}
	})
	t.Chdir(dir)
	cli = func(t *testing.T, args ...string) (string, string, int) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		code := run(ctx, args, env{stdout: &stdout, stderr: &stderr, getenv: func(k string) string {
			if k == "NATS_URL" {
				return url
			}
			return ""
		}})
		return stdout.String(), stderr.String(), code
	}
	must := func(t *testing.T, args ...string) string {
		t.Helper()
		out, errOut, code := cli(t, args...)
		if code != 0 {
			t.Fatalf("utpmesh %s: exit %d\n%s\n%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	entry := `tools:
  - tool_name: conformance_probe
    description: The conformance kit's probe.
    parameters: ` + conformance.ProbeParameters + `
    target_subject: cg.{ver}.{project_id}.{channel_id}.cmd.tool.conformance_probe
    after_execution: suspend
    options: {timeout_seconds: 5}
`
	policy := `permit(principal, action == Action::"conformance_probe", resource in Project::"demo");` + "\n"
	gomodtest.Write(t, dir, map[string]string{"probe.yaml": entry, "probe.cedar": policy})
	must(t, "identity", "add", "worker", "conformance", "--tools", "conformance_probe")
	must(t, "tools", "import", "--project", "demo", "probe.yaml")
	cur := must(t, "policy", "get", "--project", "demo")
	gomodtest.Write(t, dir, map[string]string{"all.cedar": cur + policy})
	must(t, "policy", "put", "--project", "demo", "--yes", "all.cedar")
	gomodtest.Write(t, dir, map[string]string{"kit.jwt": must(t, "mandate", "issue", "--project", "demo", "--agent", "conformance-kit", "--policy", "probe.cedar")})
	return dir, url, cli, func(t *testing.T, extra ...string) (string, string, int) {
		t.Helper()
		return cli(t, append([]string{"conformance", "tool", "--creds", "utpmesh-data/creds/agent-demo.nk",
			"--mandate", "kit.jwt", "--admin-creds", "utpmesh-data/creds/admin.nk"}, extra...)...)
	}
}

// kitResults runs the kit with --json and returns its results.
func kitResults(t *testing.T, kit func(t *testing.T, extra ...string) (string, string, int), extra ...string) ([]conformance.Result, int, string) {
	t.Helper()
	out, errOut, code := kit(t, append([]string{"--json"}, extra...)...)
	var rs []conformance.Result
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("conformance tool %s: exit %d, output is not the results (%v)\n%s\n%s", strings.Join(extra, " "), code, err, out, errOut)
	}
	return rs, code, errOut
}

// checkAllPass fails the test unless every tool case ran and passed.
func checkAllPass(t *testing.T, rs []conformance.Result, code int, logs string) {
	t.Helper()
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.Line() + "\n")
	}
	t.Logf("conformance tool:\n%s", b.String())
	if code != 0 || len(rs) != len(conformance.ToolCases()) {
		t.Fatalf("exit %d with %d of %d cases:\n%s\nkit's stderr:\n%s", code, len(rs), len(conformance.ToolCases()), b.String(), logs)
	}
	for i, r := range rs {
		if r.Outcome != conformance.Pass || r.Case != conformance.ToolCases()[i][0] {
			t.Fatalf("case %d: %s\nkit's stderr:\n%s", i, r.Line(), logs)
		}
	}
}

// TestConformanceGo runs the conformance kit's tool cases against the Go
// SDK's probe (utpmesh conformance probe), which the kit starts, crashes
// and kills; and checks that a probe that breaks the contract fails.
func TestConformanceGo(t *testing.T) {
	_, url, cli, kit := conformanceMesh(t)
	probe := "UTPMESH_TEST_EXEC=1 " + utpmeshBin() + " conformance probe --nats " + url + " --creds utpmesh-data/creds/worker-conformance.nk"
	rs, code, logs := kitResults(t, kit, "--exec", probe)
	checkAllPass(t, rs, code, logs)

	// A tool that does not follow the contract fails the kit (exit 1),
	// one line per case; a case the configuration cannot run is skipped.
	out, errOut, code := kit(t, "--tool", "echo", "--mandate", "utpmesh-data/demo-mandate.jwt", "--case", "success,tool_failure", "--case", "sigkill")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 1 || len(lines) != 3 || !strings.HasPrefix(lines[0], "FAIL success (§5.2) got ") ||
		!strings.HasPrefix(lines[1], "FAIL tool_failure (§13) got success") || lines[2] != "SKIP sigkill (§7.4) needs the kit to run the implementation (--exec CMD)" ||
		!strings.Contains(errOut, "2 of 3 cases failed") {
		t.Fatalf("the kit against echo: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, errOut, code := kit(t, "--case", "nope"); code != 2 || !strings.Contains(errOut, `no case "nope"; the cases are success, tool_failure,`) {
		t.Fatalf("--case nope: exit %d: %s", code, errOut)
	}

	// The agent side: the kit serves the Go probe and runs the Go SDK's
	// agent program (conformance caller) through the agent cases.
	caller := "UTPMESH_TEST_EXEC=1 " + utpmeshBin() + " conformance caller --nats " + url + " --creds utpmesh-data/creds/agent-demo.nk --mandate kit.jwt"
	agentCases(t, cli, caller)

	// An agent program that breaks the contract fails (exit 1); none is a
	// usage mistake (exit 2).
	out, errOut, code = cli(t, "conformance", "agent", "--creds", "utpmesh-data/creds/worker-conformance.nk", "--case", "results", "--exec", "echo hello")
	if code != 1 || !strings.HasPrefix(out, `FAIL results (§5.2) the agent program printed "hello", which is not a result line`) {
		t.Fatalf("an agent program printing hello: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, errOut, code := cli(t, "conformance", "agent"); code != 2 || !strings.Contains(errOut, "--exec is required") {
		t.Fatalf("conformance agent without --exec: exit %d: %s", code, errOut)
	}
}

// agentCases runs the kit's agent cases against the agent program cmd and
// fails the test unless every case passes.
func agentCases(t *testing.T, cli func(t *testing.T, extra ...string) (string, string, int), cmd string) {
	t.Helper()
	out, errOut, code := cli(t, "conformance", "agent", "--json", "--creds", "utpmesh-data/creds/worker-conformance.nk", "--exec", cmd)
	var rs []conformance.Result
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("conformance agent: exit %d, output is not the results (%v)\n%s\n%s", code, err, out, errOut)
	}
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.Line() + "\n")
	}
	t.Logf("conformance agent:\n%s", b.String())
	if code != 0 || len(rs) != len(conformance.AgentCases()) {
		t.Fatalf("exit %d with %d of %d cases:\n%s\nstderr:\n%s", code, len(rs), len(conformance.AgentCases()), b.String(), errOut)
	}
	for i, r := range rs {
		if r.Outcome != conformance.Pass || r.Case != conformance.AgentCases()[i][0] {
			t.Fatalf("case %d: %s\nstderr:\n%s", i, r.Line(), errOut)
		}
	}
}

// TestConformanceTypeScript runs the kit's tool cases against the
// TypeScript SDK's probe (examples/conformance-probe.ts). It skips like
// TestTypeScriptSDK when Node.js or the SDK's dependencies are missing.
func TestConformanceTypeScript(t *testing.T) {
	sdk := tsSDKDir(t)
	build := exec.Command("npm", "run", "build", "--prefix", sdk)
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("npm run build: %v\n%s", err, b)
	}
	dir, url, cli, kit := conformanceMesh(t)
	probe := "node " + filepath.Join(sdk, "dist", "examples", "conformance-probe.js") + " --nats " + url + " --creds " + filepath.Join(dir, "utpmesh-data", "creds", "worker-conformance.nk")
	rs, code, logs := kitResults(t, kit, "--exec", probe)
	checkAllPass(t, rs, code, logs)

	agent := "node " + filepath.Join(sdk, "dist", "examples", "conformance-agent.js") + " --nats " + url +
		" --creds " + filepath.Join(dir, "utpmesh-data", "creds", "agent-demo.nk") + " --mandate " + filepath.Join(dir, "kit.jwt")
	agentCases(t, cli, agent)
}
