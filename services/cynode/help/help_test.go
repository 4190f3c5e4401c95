package help_test

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/utpmesh/utpmesh/services/cynode/help"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
)

// catalogue is a small catalogue to document.
var catalogue = []gateway.Spec{
	{Name: "db.task.get", Description: "Returns a task.", Scope: gateway.ScopePM, TaskScoped: true,
		Params: `{"type":"object","properties":{"task_id":{"type":"string"}}}`},
	{Name: "artifact.put", Description: "Stores an artifact.", Scope: gateway.ScopeBoth, TaskScoped: true, Params: `{"type":"object"}`},
	{Name: "x.internal", Description: "Not on any default allowlist.", Scope: gateway.ScopeBoth, Params: `not json`},
}

func start(t testing.TB, specs []gateway.Spec) (*ct.Direct, gateway.Spec) {
	t.Helper()
	cfg := ct.Config()
	// A secret in the operator's configuration must never reach help.
	cfg.AccessPolicies = `permit(principal == Agent::"SECRET-agent", action, resource);`
	d := ct.NewDirect(t, cfg)
	sp := help.Specs(func() []gateway.Spec { return specs })
	return d, sp[0]
}

func TestPages(t *testing.T) {
	pages := help.Pages()
	for _, want := range []string{"overview", "gateway", "errors", "tools"} {
		if !slices.Contains(pages, want) {
			t.Errorf("Pages() = %v lacks %s", pages, want)
		}
	}
}

func TestGet(t *testing.T) {
	d, sp := start(t, catalogue)
	for _, tc := range []struct {
		name  string
		args  map[string]any
		topic string
		has   []string
		lacks []string
	}{
		{"overview by default", map[string]any{}, "overview", []string{"# Tools", "| artifact.put | both | true | pm, pa, sandbox |", "| db.task.get | pm | true | pm, pa |"}, nil},
		{"overview by name", map[string]any{"topic": "overview"}, "overview", []string{"# Tools"}, nil},
		{"the tool index", map[string]any{"path": "tools"}, "tools", []string{"| x.internal | both | false | none by default |"}, nil},
		{"a page", map[string]any{"path": "errors"}, "errors", nil, []string{"# Tools"}},
		{"a page as topic", map[string]any{"topic": "gateway"}, "gateway", nil, nil},
		{"a tool", map[string]any{"topic": "db.task.get"}, "db.task.get", []string{"# db.task.get", "Returns a task.", "- scope: pm", "- task-scoped: true", "\"task_id\": {"}, []string{"artifact.put"}},
		{"a tool whose schema is not JSON", map[string]any{"topic": "x.internal"}, "x.internal", []string{"not json", "none by default"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.args["task_id"] = "t1"
			got := d.For(t).OK(sp, ct.PAAgent, tc.args)
			content := ct.Str(got, "content")
			if got["topic"] != tc.topic || got["format"] != "markdown" || got["truncated"] != false || content == "" {
				t.Fatalf("answer %v", got)
			}
			for _, s := range tc.has {
				if !strings.Contains(content, s) {
					t.Errorf("content lacks %q:\n%s", s, content)
				}
			}
			for _, s := range append(tc.lacks, "SECRET", "pa-agent", "alice") {
				if strings.Contains(content, s) {
					t.Errorf("content has %q", s)
				}
			}
		})
	}
	for _, tc := range []struct {
		name string
		args map[string]any
		typ  string
		says string
	}{
		{"both", map[string]any{"topic": "a", "path": "b"}, "invalid_argument", "pass topic or path, not both"},
		{"no such page", map[string]any{"path": "nope"}, "not_found", `no help page "nope"; pages: `},
		{"a path out of the pages", map[string]any{"path": "../help"}, "not_found", "no help page"},
		{"a nested path", map[string]any{"path": "topics/errors"}, "not_found", "no help page"},
		{"a page with its suffix", map[string]any{"topic": "errors.md"}, "not_found", `no help topic "errors.md": pass a tool name`},
		{"no such tool", map[string]any{"topic": "db.nope"}, "not_found", "help.get with path \"tools\" lists them"},
		{"topic of the wrong type", map[string]any{"topic": 1}, "invalid_argument", "arguments:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.args["task_id"] = "t1"
			d.For(t).Fail(sp, ct.PAAgent, tc.args, tc.typ, tc.says)
		})
	}
}

// An answer over MaxBytes is truncated, says so, and stays valid UTF-8.
func TestTruncated(t *testing.T) {
	long := gateway.Spec{Name: "big.tool", Scope: gateway.ScopePM, Params: `{}`, Description: "x" + strings.Repeat("é", help.MaxBytes)}
	d, sp := start(t, []gateway.Spec{long})
	got := d.OK(sp, ct.PMAgent, map[string]any{"task_id": "t1", "topic": "big.tool"})
	content := ct.Str(got, "content")
	if got["truncated"] != true || len(content) > help.MaxBytes || len(content) < help.MaxBytes-utf8.UTFMax {
		t.Fatalf("truncated %v, %d bytes; want true and at most %d", got["truncated"], len(content), help.MaxBytes)
	}
	if !utf8.ValidString(content) || strings.ContainsRune(content, utf8.RuneError) {
		t.Fatalf("the truncated content is not valid UTF-8 (ends %q)", content[len(content)-8:])
	}
}
