package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// TestAuthCLI drives policy and mandate subcommands against a real mesh
// with the gate on, set up as `utpmesh up` does.
func TestAuthCLI(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Tools: []worker.Tool{echo.Tool()},
		Projects: []string{"demo", "p2"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Auth: &mesh.AuthConfig{}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop(ctx)
	if _, err := setupAuth(ctx, m); err != nil {
		t.Fatal(err)
	}
	demo := filepath.Join(dir, "demo-mandate.jwt")
	write := func(name, text string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := write("bad.cedar", "permit(principal, action, resource);\npermit(principal action);\n")
	good := write("good.cedar", `@id("echo") permit(principal, action == Action::"echo", resource);`+"\n")
	wide := write("wide.cedar", `permit(principal, action == ATPAction::"notify_traveller", resource);`+"\n")
	narrowP := write("narrow.cedar", `permit(principal == Agent::"demo-agent", action in [Action::"echo"], resource in Project::"demo") when { context.hem_id == "" };`+"\n")
	run := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := runArgs(ctx, append(args, "--nats", m.ClientURL()), &out, &errb)
		return out.String() + errb.String(), code
	}
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"policy get demo", []string{"policy", "get"}, 0, `Action::"echo"`},
		{"policy put names the line", []string{"policy", "put", "--project", "p2", bad}, 1, "bad.cedar: line 2, column 18: expected ','"},
		{"policy put", []string{"policy", "put", "--project", "p2", "--yes", good}, 0, "version 1"},
		{"policy test allow", []string{"policy", "test", "--agent", "demo-agent", "--tool", "echo", "--mandate", demo}, 0, "ALLOW"},
		{"policy test deny", []string{"policy", "test", "--agent", "demo-agent", "--tool", "echo"}, 1, "mandate_missing"},
		{"policy config default", []string{"policy", "config", "--project", "p2"}, 0, "mandate required"},
		{"policy config opt out", []string{"policy", "config", "--project", "p2", "--mandate", "not_required"}, 0, "mandate not_required"},
		{"policy config bad value", []string{"policy", "config", "--project", "p2", "--mandate", "off"}, 1, "not_required"},
		{"policy config raw commands", []string{"policy", "config", "--project", "p2", "--commands", "raw"}, 0, "mandate not_required, commands raw"},
		{"policy config admitted again", []string{"policy", "config", "--project", "p2", "--commands", "admitted"}, 0, "mandate not_required, commands admitted"},
		{"policy config bad commands", []string{"policy", "config", "--project", "p2", "--commands", "open"}, 1, `use "admitted" or "raw"`},
		{"mandate inspect", []string{"mandate", "inspect", demo, "--data", dir}, 0, "valid (signature"},
		{"mandate query", []string{"mandate", "query", "--mandate", demo, "--booking-state", "PRE_JOURNEY"}, 0, "- echo (Action::\"echo\")"},
		{"mandate narrow too wide", []string{"mandate", "narrow", "--parent", demo, "--policy", wide, "--data", dir}, 1, "too wide"},
		{"mandate narrow", []string{"mandate", "narrow", "--parent", demo, "--policy", narrowP, "--data", dir}, 0, "eyJ"},
		{"mandate issue wildcard hem", []string{"mandate", "issue", "--agent", "a", "--policy", write("hem.cedar", `permit(principal, action, resource);`), "--data", dir}, 1, "hem_id"},
		{"mandate issue", []string{"mandate", "issue", "--agent", "a", "--policy", good, "--data", dir}, 0, "eyJ"},
		{"call without a mandate is denied", []string{"call", "echo", "--args", `{"x":1}`}, 1, "auth_failed"},
		{"call as the mandate's agent", []string{"call", "echo", "--args", `{"x":1}`, "--mandate", "@" + demo}, 0, `"x": 1`},
		{"call as another agent is denied", []string{"call", "echo", "--agent", "mallory", "--mandate", "@" + demo}, 1, "auth_failed"},
		{"call with a mandate file name", []string{"call", "echo", "--mandate", demo}, 0, "success"},
		{"call with a missing mandate file", []string{"call", "echo", "--mandate", "nofile"}, 2, "@FILE"},
		{"call with a garbled mandate", []string{"call", "echo", "--mandate", "a.b.c"}, 2, "--mandate"},
		{"mandate issue needs agent", []string{"mandate", "issue", "--policy", good, "--data", dir}, 2, "--agent"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, code := run(tc.args...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("utpmesh %s: exit %d, want %d; output lacks %q:\n%s", strings.Join(tc.args, " "), code, tc.code, tc.want, out)
			}
		})
	}
}

func runArgs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return run(ctx, args, env{stdout: stdout, stderr: stderr, getenv: func(string) string { return "" }})
}
