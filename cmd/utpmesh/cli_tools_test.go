package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/registry"
)

const weatherYAML = `tool_name: weather
description: Forecast for a city.
parameters:
  type: object
  properties:
    city: {type: string}
  required: [city]
target_subject: cg.{ver}.{project_id}.{channel_id}.cmd.tool.weather
after_execution: suspend
`

func TestCLITools(t *testing.T) {
	cm := startCLIMesh(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	weather := write("weather.yaml", weatherYAML)
	sub := filepath.Join(dir, "more")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(sub, n+".yml"), []byte("tool_name: tool_"+n+"\ndescription: d\nparameters: {type: object}\ntarget_subject: cg.{ver}.{project_id}.{channel_id}.cmd.tool."+n+"\nafter_execution: suspend\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	bad := write("bad.yaml", "tool_name: broken\nafter_execution: pause\n")

	r := cm.must(t, 0, "tools", "ls")
	wantContains(t, "tools ls", r.stdout, "TOOL", "echo", "counter", "cg.{ver}.{project_id}.{channel_id}.cmd.tool.echo")

	r = cm.must(t, 0, "tools", "import", weather, sub)
	wantContains(t, "import", r.stdout, "registered  weather", "registered  tool_a", "3 tools from 3 files registered in project demo")
	if r.stderr != "" {
		t.Fatalf("progress printed to a non-terminal: %q", r.stderr)
	}
	entries := decodeJSON[[]registry.Entry](t, cm.must(t, 0, "tools", "ls", "--json").stdout)
	names := map[string]bool{}
	for _, e := range entries {
		names[e.ToolName] = true
	}
	for _, n := range []string{"echo", "weather", "tool_a", "tool_b"} {
		if !names[n] {
			t.Fatalf("tools ls --json lacks %s: %v", n, names)
		}
	}

	r = cm.must(t, 0, "tools", "get", "weather")
	wantContains(t, "get", r.stdout, "tool             weather", `"required": [`)
	got := decodeJSON[[]registry.Entry](t, cm.must(t, 0, "tools", "get", "weather", "--json").stdout)
	if len(got) != 1 || got[0].ToolName != "weather" {
		t.Fatalf("get --json = %+v", got)
	}

	for _, tc := range []struct {
		name string
		code int
		args []string
		want string // in stderr (or stdout for help)
	}{
		{"get missing", 1, []string{"tools", "get", "weather", "nope"}, `has no tool "nope"`},
		{"import invalid registers nothing", 1, []string{"tools", "import", weather, bad}, "bad.yaml: registry: tools[0]"},
		{"import missing file", 2, []string{"tools", "import", filepath.Join(dir, "missing.yaml")}, "no such file"},
		{"rm missing", 1, []string{"tools", "rm", "nope"}, `has no tool "nope"`},
		{"no subcommand", 2, []string{"tools"}, "name a subcommand"},
		{"typo", 2, []string{"tools", "lss"}, "did you mean 'utpmesh tools ls'?"},
		{"flag typo", 2, []string{"tools", "ls", "--projct", "demo"}, "did you mean --project?"},
		{"bad project", 2, []string{"tools", "ls", "--project", "a.b"}, "--project"},
		{"help", 0, []string{"tools", "--help"}, "import FILE.yaml|DIR"},
		{"sub help", 0, []string{"tools", "import", "--help"}, "--dry-run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cm.must(t, tc.code, tc.args...)
			wantContains(t, "output", r.stdout+r.stderr, tc.want)
		})
	}
	r = cm.must(t, 0, "tools", "import", "--dry-run", bad[:len(bad)-len("bad.yaml")]+"weather.yaml")
	wantContains(t, "dry run", r.stdout, "nothing registered")

	r = cm.must(t, 0, "tools", "rm", "weather", "tool_a")
	wantContains(t, "rm", r.stdout, "removed  weather", "removed  tool_a")
	cm.must(t, 1, "tools", "get", "weather")
}

// TestCLIHelpOnce: --help prints the usage once and exits 0, for every
// subcommand of this file set.
func TestCLIHelpOnce(t *testing.T) {
	cm := &cliMesh{url: "nats://127.0.0.1:1"} // help never connects
	for _, args := range [][]string{
		{"tools", "ls", "--help"}, {"call", "--help"}, {"cards", "get", "--help"},
		{"turns", "show", "--help"}, {"turns", "replay", "-h"}, {"status", "--help"},
	} {
		r := cm.must(t, 0, args...)
		if n := strings.Count(r.stdout, "Usage:"); n != 1 {
			t.Fatalf("%v printed Usage %d times:\n%s", args, n, r.stdout)
		}
	}
}
