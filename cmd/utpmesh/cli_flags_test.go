package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/mandate"
)

// TestFlagMistakeIsShort: a wrong flag prints the mistake, the suggestion
// and where the flags are listed — two lines on stderr, no usage (a value
// out of range: one line saying what to type) — for
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
		{"up dispatch linger out of range", []string{"up", "--dispatch-linger", "1s"}, []string{
			"utpmesh up: --dispatch-linger 1s: use 0 (commit at once) to 100ms, e.g. --dispatch-linger 1ms"}},
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

// TestHelpSaysEachDefaultOnce: every command's --help lists its flags as
// --name, and no flag's entry says its default twice (a usage text that
// names its default gets none from the flag package). NATS_URL is set, as
// on a machine that uses it, so --nats has a non-zero default.
func TestHelpSaysEachDefaultOnce(t *testing.T) {
	helps := [][]string{{"tools", "ls", "--help"}, {"turns", "show", "--help"}, {"identity", "add", "--help"},
		{"mandate", "issue", "--help"}, {"policy", "get", "--help"}}
	for name := range specs {
		helps = append(helps, []string{name, "--help"})
	}
	checked := 0
	for _, args := range helps {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, env{stdout: &out, stderr: &errb, getenv: func(k string) string {
			if k == "NATS_URL" {
				return "nats://127.0.0.1:4222"
			}
			return ""
		}})
		if code != 0 {
			t.Fatalf("utpmesh %s: exit %d\n%s", strings.Join(args, " "), code, errb.String())
		}
		_, flags, ok := strings.Cut(out.String(), "\nFlags:\n")
		if !ok {
			continue // a command with subcommands lists them instead
		}
		checked++
		for _, entry := range strings.Split("\n"+flags, "\n  --")[1:] {
			if n := strings.Count(entry, "(default"); n > 1 {
				t.Errorf("utpmesh %s: --%s says its default %d times", strings.Join(args, " "), entry, n)
			}
		}
		if strings.Contains(flags, "\n  -") && !strings.Contains(flags, "\n  --") || strings.HasPrefix(flags, "  -") && !strings.HasPrefix(flags, "  --") {
			t.Errorf("utpmesh %s lists flags as -name:\n%s", strings.Join(args, " "), flags)
		}
	}
	if checked < 10 {
		t.Fatalf("only %d commands listed flags", checked)
	}
	var out bytes.Buffer
	run(context.Background(), []string{"call", "--help"}, env{stdout: &out, stderr: io.Discard, getenv: func(string) string { return "" }})
	for _, want := range []string{
		"  --nats string\n    \tNATS server URL (default $NATS_URL or nats://127.0.0.1:4222)\n",
		"  --args string\n    \tthe call's arguments: a JSON object, or @FILE to read it from a file (default \"{}\")\n",
		"  --timeout duration\n    \thow long one request to the mesh may take (default 10s)\n",
		"  --json\n    \tprint JSON instead of a table\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("utpmesh call --help lacks %q:\n%s", want, out.String())
		}
	}
}

// TestVersion: version prints a line, --json an object, and refuses
// anything else as a usage error.
func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"version"}, 0, "utpmesh " + Version + "\n"},
		{[]string{"version", "--json"}, 0, `{` + "\n" + `  "version": "` + Version + `",` + "\n" + `  "protocol": "v1r3",` + "\n" + `  "go": "` + runtime.Version() + `"` + "\n}\n"},
		{[]string{"version", "--jsn"}, 2, "utpmesh version: unknown flag --jsn; did you mean --json?\nrun 'utpmesh version --help' for all flags\n"},
		{[]string{"version", "x"}, 2, "utpmesh version: unexpected argument \"x\" (version takes only --json)\n"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, env{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }})
		got := out.String()
		if code != 0 {
			got = errb.String()
		}
		if code != tc.code || got != tc.want {
			t.Errorf("utpmesh %s: exit %d, output %q; want %d, %q", strings.Join(tc.args, " "), code, got, tc.code, tc.want)
		}
	}
}
