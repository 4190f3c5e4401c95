package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/mandate"
)

// TestFlagMistakeIsShort: a wrong flag prints the mistake, the suggestion
// and where the flags are listed — two lines on stderr, no usage — for
// every subcommand, since they share the flag parsing. --help still prints
// the full usage on stdout.
func TestFlagMistakeIsShort(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"call unknown flag", []string{"call", "echo", "--agnet", "x"}, []string{
			"utpmesh call: unknown flag --agnet; did you mean --agent?",
			"run 'utpmesh call --help' for all flags"}},
		{"tools ls unknown flag", []string{"tools", "ls", "--jsn"}, []string{
			"utpmesh tools: unknown flag --jsn; did you mean --json?",
			"run 'utpmesh tools ls --help' for all flags"}},
		{"undo flag without value", []string{"undo", "c1", "--turn"}, []string{
			"utpmesh undo: --turn needs a value: agent_turn_id of the call to undo (required; 'utpmesh call' and 'utpmesh confirm' print the exact undo command)",
			"run 'utpmesh undo --help' for all flags"}},
		{"receipts bad duration", []string{"receipts", "show", "t", "--timeout", "soon"}, []string{
			`utpmesh receipts: --timeout "soon": parse error; --timeout is: how long one request to the mesh may take`,
			"run 'utpmesh receipts --help' for all flags"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), tc.args, env{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }})
			if code != 2 {
				t.Fatalf("exit %d, want 2\n%s", code, errb.String())
			}
			if out.Len() != 0 {
				t.Fatalf("a flag mistake printed on stdout:\n%s", out.String())
			}
			if got := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("stderr =\n%s\nwant exactly\n%s", errb.String(), strings.Join(tc.want, "\n"))
			}
		})
	}
	for _, args := range [][]string{{"call", "--help"}, {"tools", "ls", "--help"}, {"undo", "-h"}} {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, env{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }})
		if code != 0 || !strings.HasPrefix(out.String(), "Usage: utpmesh "+args[0]) || !strings.Contains(out.String(), "-nats") || errb.Len() != 0 {
			t.Fatalf("utpmesh %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errb.String())
		}
	}
}

// TestMandateFlag: --mandate reads a file when the value names one (also
// a path with dots, shaped like a compact JWS), else takes a JWS-shaped
// value as the token, else fails saying what to pass.
func TestMandateFlag(t *testing.T) {
	key, err := mandate.GenerateKey("demo")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := mandate.Issue(key, mandate.Claims{Subject: "ann", ExpiresAt: time.Now().Add(time.Hour).Unix(),
		Mandate: mandate.Grant{PolicySet: `permit(principal, action == Action::"echo", resource);`}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dotted := filepath.Join(root, "a.b", "demo-mandate.jwt") // two dots: shaped like a JWS
	if err := os.MkdirAll(filepath.Dir(dotted), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dotted, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A file whose name is shaped like a JWS wins over the token reading.
	jwsNamed := filepath.Join(root, "x.y.z")
	if err := os.WriteFile(jwsNamed, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	for _, tc := range []struct {
		name, value    string
		agent, source  string
		wantErr        string
		wantUsageError bool
	}{
		{name: "file with dots", value: dotted, agent: "ann", source: dotted},
		{name: "relative file with dots", value: "./a.b/demo-mandate.jwt", agent: "ann", source: "./a.b/demo-mandate.jwt"},
		{name: "@file", value: "@" + dotted, agent: "ann", source: dotted},
		{name: "file named like a JWS", value: "x.y.z", agent: "ann", source: "x.y.z"},
		{name: "token", value: tok, agent: "ann", source: "--mandate"},
		{name: "token with spaces", value: "  " + tok + "\n", agent: "ann", source: "--mandate"},
		{name: "missing file", value: "./utpmesh-data/demo-mandate.jwt", wantErr: "no such file, and not a mandate token", wantUsageError: true},
		{name: "missing file without dots", value: "mandate", wantErr: "pass an existing file as FILE or @FILE, e.g. --mandate ./utpmesh-data/demo-mandate.jwt, or the token itself", wantUsageError: true},
		{name: "missing @file", value: "@nope.jwt", wantErr: "--mandate @nope.jwt: open nope.jwt", wantUsageError: true},
		{name: "JWS-shaped garbage", value: "a.b.c", wantErr: "--mandate a.b.c: mandate: malformed token", wantUsageError: true},
		{name: "a directory", value: "a.b", wantErr: "--mandate a.b is a directory", wantUsageError: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errb bytes.Buffer
			cf := callerFlags{mandate: tc.value, defAgent: "cli", env: env{stderr: &errb, getenv: func(string) string { return "" }}}
			agentID, token, err := cf.resolve()
			if tc.wantErr != "" {
				var ue *usageError
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || errors.As(err, &ue) != tc.wantUsageError {
					t.Fatalf("resolve(%q) = %v, want a usage error containing %q", tc.value, err, tc.wantErr)
				}
				return
			}
			if err != nil || agentID != tc.agent || token != tok || cf.source != tc.source {
				t.Fatalf("resolve(%q) = %q, token ok %v, source %q, %v; want %q, source %q", tc.value, agentID, token == tok, cf.source, err, tc.agent, tc.source)
			}
			if errb.Len() != 0 {
				t.Fatalf("an explicit --mandate printed %q", errb.String())
			}
		})
	}
}
