// Package help is the CyNodeAI help.get tool: documentation for using the
// catalogue's tools, generated from the tools' own definitions (name,
// description, scope, task scoping, which agent types' default allowlists
// admit it, argument schema) and from short pages embedded in the binary
// (topics/*.md). It never reads the operator's configuration, so no agent
// registration, policy or other secret can appear in it. Answers are
// bounded by MaxBytes (truncated answers say so).
package help

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
)

// ToolGet is the tool name.
const ToolGet = "help.get"

// MaxBytes bounds one help answer's content.
const MaxBytes = 32 << 10

//go:embed topics/*.md
var topics embed.FS

// Pages lists the embedded pages (path values).
func Pages() []string {
	ents, _ := topics.ReadDir("topics")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".md"))
	}
	return append(out, "tools")
}

// Specs returns the help tool; catalogue returns every tool it documents.
func Specs(catalogue func() []gateway.Spec) []gateway.Spec {
	return []gateway.Spec{{
		Name: ToolGet, Description: "Documentation for the CyNodeAI tools: topic (a tool name) or path (overview, gateway, errors, tools); the overview when neither.",
		Scope: gateway.ScopeBoth, TaskScoped: true,
		Params: `{"type":"object","additionalProperties":false,"required":["task_id"],"properties":{"task_id":` + gateway.IDSchema +
			`,"topic":{"type":"string","maxLength":256},"path":{"type":"string","maxLength":256},` + gateway.ContextSchema + `}}`,
		Run: func(ctx context.Context, x *gateway.Exec) (any, error) { return get(x, catalogue()) },
	}}
}

func get(x *gateway.Exec, specs []gateway.Spec) (any, error) {
	var a struct {
		Topic string `json:"topic"`
		Path  string `json:"path"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	if a.Topic != "" && a.Path != "" {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "pass topic or path, not both")
	}
	var content string
	name := a.Topic + a.Path
	switch {
	case name == "" || name == "overview":
		content = page("overview") + "\n" + toolIndex(specs)
		name = "overview"
	case a.Path == "tools":
		content = toolIndex(specs)
	case a.Path != "":
		content = page(a.Path)
		if content == "" {
			return nil, gateway.Errorf(gateway.TypeNotFound, "no help page %q; pages: %s", a.Path, strings.Join(Pages(), ", "))
		}
	default:
		sp := find(specs, a.Topic)
		if sp == nil {
			if p := page(a.Topic); p != "" {
				content = p
				break
			}
			return nil, gateway.Errorf(gateway.TypeNotFound, "no help topic %q: pass a tool name (help.get with path \"tools\" lists them) or one of the pages %s", a.Topic, strings.Join(Pages(), ", "))
		}
		content = toolPage(sp)
	}
	truncated := false
	if len(content) > MaxBytes {
		// Cut at a character boundary: the answer stays valid UTF-8.
		n := MaxBytes
		for n > 0 && !utf8.RuneStart(content[n]) {
			n--
		}
		content, truncated = content[:n], true
	}
	return map[string]any{"topic": name, "format": "markdown", "content": content, "truncated": truncated}, nil
}

func page(name string) string {
	if strings.ContainsAny(name, "/\\.") {
		return ""
	}
	raw, err := topics.ReadFile("topics/" + name + ".md")
	if err != nil {
		return ""
	}
	return string(raw)
}

func find(specs []gateway.Spec, name string) *gateway.Spec {
	for i := range specs {
		if specs[i].Name == name {
			return &specs[i]
		}
	}
	return nil
}

// agentTypes lists the agent types whose default allowlist and the tool's
// scope admit it.
func agentTypes(sp *gateway.Spec) string {
	var out []string
	for _, t := range gateway.AgentTypes {
		if gateway.Allows(gateway.DefaultAllowlists[t], sp.Name) && sp.Scope.Admits(t) {
			out = append(out, string(t))
		}
	}
	if len(out) == 0 {
		return "none by default"
	}
	return strings.Join(out, ", ")
}

func toolIndex(specs []gateway.Spec) string {
	sorted := append([]gateway.Spec(nil), specs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var b strings.Builder
	b.WriteString("# Tools\n\n| tool | scope | task-scoped | agent types (default) | what it does |\n| --- | --- | --- | --- | --- |\n")
	for i := range sorted {
		sp := &sorted[i]
		fmt.Fprintf(&b, "| %s | %s | %v | %s | %s |\n", sp.Name, sp.Scope, sp.TaskScoped, agentTypes(sp), sp.Description)
	}
	return b.String()
}

func toolPage(sp *gateway.Spec) string {
	var schema bytes.Buffer
	if err := json.Indent(&schema, []byte(sp.Params), "", "  "); err != nil {
		schema.WriteString(sp.Params)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n%s\n\n- scope: %s\n- task-scoped: %v\n- agent types (default allowlists): %s\n\nArguments (JSON Schema):\n\n```json\n%s\n```\n",
		sp.Name, sp.Description, sp.Scope, sp.TaskScoped, agentTypes(sp), schema.String())
	return b.String()
}
