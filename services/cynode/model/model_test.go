package model_test

import (
	"fmt"
	"testing"

	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
	"github.com/utpmesh/utpmesh/services/cynode/model"
)

func start(t *testing.T, models []gateway.Model) (*ct.Direct, func(string) gateway.Spec) {
	t.Helper()
	cfg := ct.Config()
	cfg.Models = models
	d := ct.NewDirect(t, cfg)
	specs := model.Specs()
	return d, func(name string) gateway.Spec { return d.Spec(specs, name) }
}

var registry = []gateway.Model{
	{ID: "zeta", Provider: "local", Capabilities: []string{"chat"}, ContextTokens: 8192, Available: true},
	{ID: "alpha", Provider: "remote", DisplayName: "Alpha", Capabilities: []string{"chat", "vision"}, ContextTokens: 128000},
	{ID: "mid", Provider: "local", Capabilities: []string{"embedding"}},
}

func ids(v map[string]any) []string {
	var out []string
	for _, m := range v["models"].([]any) {
		out = append(out, ct.Str(m, "model_id"))
	}
	return out
}

func TestList(t *testing.T) {
	d, spec := start(t, registry)
	for _, tc := range []struct {
		capability string
		want       []string
	}{
		{"", []string{"alpha", "mid", "zeta"}},
		{"chat", []string{"alpha", "zeta"}},
		{"vision", []string{"alpha"}},
		{"audio", nil},
	} {
		got := d.OK(spec(model.ToolList), ct.PMAgent, map[string]any{"capability": tc.capability})
		if fmt.Sprint(ids(got)) != fmt.Sprint(tc.want) || got["models"] == nil {
			t.Errorf("capability %q: %v; want %v (sorted by id, [] when none)", tc.capability, got, tc.want)
		}
	}
	// The registry in the configuration keeps its order.
	if registry[0].ID != "zeta" {
		t.Fatal("model.list sorted the configuration's registry in place")
	}
	d.Fail(spec(model.ToolList), ct.PMAgent, map[string]any{"capability": 1}, "invalid_argument", "arguments:")
}

func TestGet(t *testing.T) {
	d, spec := start(t, registry)
	got := d.OK(spec(model.ToolGet), ct.PMAgent, map[string]any{"model_id": "alpha"})
	if got["provider"] != "remote" || got["display_name"] != "Alpha" || got["context_tokens"] != float64(128000) || got["available"] != false {
		t.Fatalf("get = %v", got)
	}
	d.Fail(spec(model.ToolGet), ct.PMAgent, map[string]any{"model_id": "beta"}, "not_found", `no model "beta" in the registry (known: [alpha mid zeta]; model.list shows them)`)

	empty, spec := start(t, nil)
	if got := empty.OK(spec(model.ToolList), ct.PMAgent, map[string]any{}); got["models"] == nil || len(got["models"].([]any)) != 0 {
		t.Fatalf("an empty registry lists [] (not null): %v", got)
	}
	empty.Fail(spec(model.ToolGet), ct.PMAgent, map[string]any{"model_id": "x"}, "not_found", "known: []")
}
