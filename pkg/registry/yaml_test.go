package registry_test

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
)

func TestParseYAMLFile(t *testing.T) {
	data, err := os.ReadFile("testdata/tools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	es, err := registry.ParseYAML(data, "demo")
	if err != nil {
		t.Fatalf("ParseYAML: %v", err)
	}
	if len(es) != 3 {
		t.Fatalf("got %d entries", len(es))
	}
	echo, search, art := es[0], es[1], es[2]
	if echo.ToolName != "echo" || echo.ProjectID != "demo" ||
		echo.TargetSubject != "cg.{ver}.{project_id}.{channel_id}.cmd.tool.echo" ||
		echo.AfterExecution != card.Suspend || echo.Options.TimeoutSeconds != 5 ||
		string(echo.Options.Args.Defaults["times"]) != "1" || echo.Options.RiskLevel != registry.RiskLow {
		t.Errorf("echo = %+v", echo)
	}
	s, err := registry.CompileSchema(echo.Parameters)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(json.RawMessage(`{"text":"hi","times":2}`)); err != nil {
		t.Errorf("echo args: %v", err)
	}
	if err := s.Validate(json.RawMessage(`{"times":11}`)); err == nil {
		t.Error("echo schema accepted bad args")
	}
	if search.ToolName != "web_search" || search.Options.TimeoutSeconds != 20.5 ||
		string(search.Options.Args.Fixed["max_results"]) != "5" || search.Options.MaxDeliveries != 3 ||
		search.Options.Envs["SEARCH_API_KEY_ENV"] != "SEARCH_API_KEY" {
		t.Errorf("web_search = %+v", search)
	}
	if art.ToolName != "artifact.put" || art.AfterExecution != card.Terminate ||
		!strings.HasSuffix(art.Description, "deliverable.\n") || art.Options.CedarAction != `ATPAction::"put_artifact"` ||
		string(art.Options.Extra["ui_allowed"]) != "true" ||
		string(art.Options.Extra["jina"]) != `{"endpoint_template":"/{url}","mode":"reader"}` {
		t.Errorf("artifact.put = %+v", art)
	}
}

func TestParseYAMLShapes(t *testing.T) {
	const one = `
tool_name: "web_search"
description: "Mock/real web search tool (subject-based)."
target_subject: "cg.v1r4.{project_id}.{channel_id}.cmd.tool.search.call"
after_execution: "suspend"
parameters:
  type: "object"
  properties:
    query:
      type: "string"
  required:
    - "query"
options: {}
`
	tool := func(name string) string {
		return "- name: " + name + `
  target_subject: cg.{ver}.{project_id}.{channel_id}.cmd.tool.x
  after_execution: suspend
  parameters: {type: object}
`
	}
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"empty", ``, nil},
		{"comment only", "# nothing\n", nil},
		{"single tool", one, []string{"web_search"}},
		{"list", tool("a") + tool("b"), []string{"a", "b"}},
		{"tools key", "tools:\n" + indent(tool("a")+tool("b")), []string{"a", "b"}},
		{"empty tools", "tools: []\n", nil},
		{"null tools", "tools:\n", nil},
		{"multi document", one + "---\n" + tool("a") + "---\n" + "tools:\n" + indent(tool("b")), []string{"web_search", "a", "b"}},
		{"project_id equal", "- project_id: demo\n  " + tool("a")[2:], []string{"a"}},
		{"name and tool_name equal", "- tool_name: a\n  " + tool("a")[2:], []string{"a"}},
		{"timestamp in schema", tool("a") + "  options: {stamp: 2024-01-02T03:04:05Z}\n", []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es, err := registry.ParseYAML([]byte(tc.yaml), "demo")
			if err != nil {
				t.Fatalf("ParseYAML: %v", err)
			}
			if es == nil {
				t.Fatal("nil slice")
			}
			var got []string
			for _, e := range es {
				got = append(got, e.ToolName)
				if e.ProjectID != "demo" {
					t.Errorf("project %q", e.ProjectID)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("tools = %v, want %v", got, tc.want)
			}
		})
	}
}

func indent(s string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = "  " + l
		}
	}
	return strings.Join(lines, "")
}

func TestParseYAMLErrors(t *testing.T) {
	const ok = `  target_subject: cg.{ver}.{project_id}.{channel_id}.cmd.tool.x
  after_execution: suspend
  parameters: {type: object}
`
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"syntax", "tools: [\n", "yaml"},
		{"scalar document", "42\n", "document[0]"},
		{"tools not list", "tools: {a: 1}\n", "document[0].tools"},
		{"extra top-level key", "tools: []\nversion: 1\n", `unknown top-level key "version"`},
		{"item not mapping", "- just a string\n", "tools[0]: must be a mapping"},
		{"unknown key", "- name: a\n  target_subjet: x\n" + ok, `tools[0].target_subjet: unknown key`},
		{"missing name", "- description: d\n" + ok, "tools[0].tool_name: is required"},
		{"bad after_execution", "- name: a\n" + ok + "- name: b\n" + ok + "- name: c\n  target_subject: cg.{ver}.{project_id}.{channel_id}.cmd.tool.x\n  after_execution: pause\n  parameters: {type: object}\n",
			`tools[2].after_execution: "pause" is not suspend|terminate`},
		{"description number", "- name: a\n  description: 5\n" + ok, "tools[0].description: must be a string, got integer"},
		{"name list", "- name: [a]\n" + ok, "tools[0].name: must be a string, got list"},
		{"name differs", "- name: a\n  tool_name: b\n" + ok, "tools[0].name"},
		{"project differs", "- name: a\n  project_id: other\n" + ok, "tools[0].project_id"},
		{"duplicate", "- name: a\n" + ok + "- name: a\n" + ok, "tools[1].tool_name: \"a\" is a duplicate of tools[0]"},
		{"reserved", "- name: list_tools\n" + ok, "tools[0].tool_name"},
		{"pmo subject", "- name: provision_agent\n  target_subject: cg.v1r4.{project_id}.{channel_id}.cmd.sys.pmo.internal.provision_agent\n  after_execution: suspend\n  parameters: {type: object}\n",
			"tools[0].target_subject"},
		{"parameters string", "- name: a\n  target_subject: cg.{ver}.{project_id}.{channel_id}.cmd.tool.x\n  after_execution: suspend\n  parameters: object\n", "tools[0].parameters: must be a mapping"},
		{"parameters int key", "- name: a\n  target_subject: cg.{ver}.{project_id}.{channel_id}.cmd.tool.x\n  after_execution: suspend\n  parameters:\n    type: object\n    properties:\n      1: {type: string}\n",
			"tools[0].parameters.properties: mapping key 1 (integer) is not a string"},
		{"parameters bool key in list", "- name: a\n  target_subject: cg.{ver}.{project_id}.{channel_id}.cmd.tool.x\n  after_execution: suspend\n  parameters:\n    type: object\n    allOf:\n      - {true: 1}\n",
			"tools[0].parameters.allOf[0]: mapping key true"},
		{"item int key", "- 1: a\n", "tools[0]: mapping key 1"},
		{"nan", "- name: a\n" + ok + "  options: {x: .nan}\n", "tools[0].options.x: NaN has no JSON representation"},
		{"options list", "- name: a\n" + ok + "  options: [1]\n", "tools[0].options: must be a mapping"},
		{"options timeout string", "- name: a\n" + ok + "  options: {timeout_seconds: soon}\n", "tools[0].options.timeout_seconds"},
		{"options args typo", "- name: a\n" + ok + "  options: {args: {default: {}}}\n", "tools[0].options.args: unknown key"},
		{"options risk", "- name: a\n" + ok + "  options: {risk_level: extreme}\n", "tools[0].options.risk_level"},
		{"bad schema", "- name: a\n  target_subject: cg.{ver}.{project_id}.{channel_id}.cmd.tool.x\n  after_execution: suspend\n  parameters: {type: object, properties: {x: {type: strung}}}\n",
			"tools[0].parameters: invalid JSON Schema: at /properties/x/type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es, err := registry.ParseYAML([]byte(tc.yaml), "demo")
			if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseYAML = %d entries, %v; want ErrInvalid containing %q", len(es), err, tc.want)
			}
		})
	}
	if _, err := registry.ParseYAML([]byte("[]"), "bad project"); !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "project_id") {
		t.Errorf("bad project: %v", err)
	}
}

func FuzzParseYAML(f *testing.F) {
	if data, err := os.ReadFile("testdata/tools.yaml"); err == nil {
		f.Add(string(data))
	}
	for _, s := range []string{"", "[]", "tools: []", "- name: a\n", "a: &x [*x]\n", "{1: 2}", "- {name: a, parameters: {type: object, properties: {1: 2}}}\n",
		"tool_name: a\ntarget_subject: cg.{ver}.{project_id}.{channel_id}.cmd.tool.x\nafter_execution: suspend\nparameters: {type: object}\noptions: {args: {fixed: {x: .inf}}}\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		es, err := registry.ParseYAML([]byte(s), "demo")
		if err != nil {
			if !errors.Is(err, registry.ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			return
		}
		for _, e := range es {
			if err := registry.Validate(e); err != nil {
				t.Fatalf("ParseYAML returned an invalid entry: %v", err)
			}
			if _, err := json.Marshal(e); err != nil {
				t.Fatalf("entry does not marshal: %v", err)
			}
		}
	})
}
