package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// authMesh is a real mesh with the gate on, set up as `utpmesh up` does
// (project demo: echo registered, the demo policy set is version 1).
func authMesh(t *testing.T) (*mesh.Mesh, string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Tools: []worker.Tool{echo.Tool()},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Auth: &mesh.AuthConfig{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	})
	if _, err := setupAuth(ctx, m); err != nil {
		t.Fatal(err)
	}
	return m, dir
}

// fakeStdin makes the CLI read in from stdin and see a terminal or not.
func fakeStdin(t *testing.T, in string, terminal bool) {
	t.Helper()
	oldIn, oldTerm := policyStdin, stdinIsTerminal
	policyStdin = strings.NewReader(in)
	stdinIsTerminal = func() bool { return terminal }
	t.Cleanup(func() { policyStdin, stdinIsTerminal = oldIn, oldTerm })
}

// TestPolicyPutConfirmHistoryRollback walks an operator through a refused
// typo, a diff that needs confirmation, history and rollback.
func TestPolicyPutConfirmHistoryRollback(t *testing.T) {
	m, _ := authMesh(t)
	file := func(text string) string {
		p := filepath.Join(t.TempDir(), "p.cedar")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v2 := "@id(\"echo-only\")\npermit(principal, action == Action::\"echo\", resource);\n"
	v3 := "@id(\"echo-agent\")\npermit(principal == Agent::\"demo-agent\", action == Action::\"echo\", resource);\n"
	steps := []struct {
		name     string
		stdin    string
		terminal bool
		args     []string
		code     int
		want     []string
	}{
		{"action typo is refused", "", false, []string{"policy", "put", "--yes", file(`permit(principal, action == Action::"ecoh", resource);`)}, 1,
			[]string{`p.cedar: line 1, column 1: policy policy0: unknown action Action::"ecoh"; did you mean Action::"echo"?`}},
		{"malformed is refused in words", "", false, []string{"policy", "put", "--yes", file("permit(principal, action, resource")}, 1,
			[]string{"p.cedar: line 1, column 35: expected ')' to close the '(' at line 1, column 7, but the policy text ended"}},
		{"unknown attribute is refused", "", false, []string{"policy", "put", "--yes", file(`permit(principal, action == Action::"echo", resource) when { context.hemid == "" };`)}, 1,
			[]string{"did you mean context.hem_id?"}},
		{"no terminal and no --yes", "", false, []string{"policy", "put", file(v2)}, 1,
			[]string{"--- stored version 1 of demo", "+ permit(principal, action == Action::\"echo\", resource);", "stdin is not a terminal", "pass --yes"}},
		{"answer no", "n\n", true, []string{"policy", "put", file(v2)}, 1,
			[]string{"replace the policy set of demo? [y/N]", "not replaced: the policy set of demo stays at version 1"}},
		{"still version 1", "", false, []string{"policy", "history"}, 0, []string{"1        "}},
		{"answer yes", "y\n", true, []string{"policy", "put", file(v2)}, 0, []string{"stored policies of demo: version 2"}},
		{"identical is unchanged", "", false, []string{"policy", "put", file(v2)}, 0, []string{"policies of demo unchanged (version 2"}},
		{"stdin cannot confirm", v3, true, []string{"policy", "put", "-"}, 1, []string{"read from stdin", "--yes"}},
		{"stdin with --yes", v3, false, []string{"policy", "put", "--yes", "-"}, 0, []string{"-- stored version 2", "- @id(\"echo-only\")", "+ @id(\"echo-agent\")", "version 3"}},
		{"history", "", false, []string{"policy", "history"}, 0, []string{"VERSION", "3        ", "current", "2        ", "1        "}},
		{"get a kept version", "", false, []string{"policy", "get", "--version", "2"}, 0, []string{"version 2", `@id("echo-only")`}},
		{"rollback needs --yes", "", false, []string{"policy", "rollback"}, 1, []string{"--- stored version 3 of demo", "+++ version 2", "pass --yes"}},
		{"rollback to the previous", "", false, []string{"policy", "rollback", "--yes"}, 0, []string{"rolled back policies of demo to version 2: now version 4"}},
		{"history shows the rollback", "", false, []string{"policy", "history"}, 0, []string{"rollback to version 2"}},
		{"rollback to the same text", "", false, []string{"policy", "rollback", "2"}, 0, []string{"unchanged: version 2 has the same text as the current version 4"}},
		{"rollback to a version not kept", "", false, []string{"policy", "rollback", "--yes", "99"}, 1, []string{"version 99", "not kept", "policy history"}},
		{"rollback to a bad version", "", false, []string{"policy", "rollback", "two"}, 2, []string{`VERSION "two" is not a version number`}},
		{"rollback by number", "", false, []string{"policy", "rollback", "--yes", "1"}, 0, []string{"to version 1: now version 5"}},
		{"subcommand typo", "", false, []string{"policy", "histroy"}, 2, []string{"did you mean history?"}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			fakeStdin(t, st.stdin, st.terminal)
			out, code := runCLI(m, st.args...)
			if code != st.code {
				t.Fatalf("utpmesh %s: exit %d, want %d:\n%s", strings.Join(st.args, " "), code, st.code, out)
			}
			wantContains(t, "utpmesh "+strings.Join(st.args, " "), out, st.want...)
		})
	}
}

// runCLI runs the CLI in process against m; stdout and stderr together.
func runCLI(m *mesh.Mesh, args ...string) (string, int) {
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := runArgs(ctx, append(args, "--nats", m.ClientURL()), &out, &out)
	return out.String(), code
}

// TestMandateInspectDefaultData checks what inspect says about
// verification when --data is not given: it verifies with the default
// ./utpmesh-data when that holds the issuer key, and otherwise names the
// directory it looked in.
func TestMandateInspectDefaultData(t *testing.T) {
	m, dir := authMesh(t)
	tok := filepath.Join(dir, "demo-mandate.jwt")
	key, err := os.ReadFile(filepath.Join(dir, "keys", "demo.pem"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, cwd string)
		code  int
		want  string
	}{
		{"no default data dir", func(*testing.T, string) {}, 0,
			"not verified: no data directory ./utpmesh-data here (verification needs the issuer key of the mesh that issued it, DIR/keys/demo.pem"},
		{"default data dir without the key", func(t *testing.T, cwd string) {
			if err := os.MkdirAll(filepath.Join(cwd, "utpmesh-data"), 0o700); err != nil {
				t.Fatal(err)
			}
		}, 0, "not verified: ./utpmesh-data has no issuer key for project demo (looked for utpmesh-data/keys/demo.pem"},
		{"default data dir with the key", func(t *testing.T, cwd string) {
			if err := os.MkdirAll(filepath.Join(cwd, "utpmesh-data", "keys"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(cwd, "utpmesh-data", "keys", "demo.pem"), key, 0o600); err != nil {
				t.Fatal(err)
			}
		}, 0, "verified valid (signature and time window; issuer key in utpmesh-data/keys)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cwd := t.TempDir()
			t.Chdir(cwd)
			tc.setup(t, cwd)
			out, code := runCLI(m, "mandate", "inspect", tok)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, want %d; output lacks %q:\n%s", code, tc.code, tc.want, out)
			}
		})
	}
}
