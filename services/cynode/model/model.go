// Package model is the CyNodeAI model registry tools: model.list and
// model.get over the models the operator lists in the cynode
// configuration ("models" in cynode.json: model_id, provider,
// display_name, capabilities, context_tokens, available). Both have scope
// pm (the PM allowlist's model.*).
package model

import (
	"context"
	"sort"

	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
)

// Tool names.
const (
	ToolList = "model.list"
	ToolGet  = "model.get"
)

// Specs are the model tools.
func Specs() []gateway.Spec {
	return []gateway.Spec{
		{Name: ToolList, Description: "Lists the model registry (ids, providers, capabilities, context sizes), optionally only models with a capability.",
			Scope: gateway.ScopePM, Params: `{"type":"object","additionalProperties":false,"properties":{"capability":{"type":"string","maxLength":128}}}`, Run: list},
		{Name: ToolGet, Description: "Returns one model of the registry.",
			Scope: gateway.ScopePM, Params: `{"type":"object","additionalProperties":false,"required":["model_id"],"properties":{"model_id":{"type":"string","minLength":1,"maxLength":256}}}`, Run: get},
	}
}

func list(_ context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		Capability string `json:"capability"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	out := []gateway.Model{}
	for _, m := range x.Config.Models {
		if a.Capability == "" || contains(m.Capabilities, a.Capability) {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return map[string]any{"models": out}, nil
}

func get(_ context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		ModelID string `json:"model_id"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	for _, m := range x.Config.Models {
		if m.ID == a.ModelID {
			return m, nil
		}
	}
	ids := []string{}
	for _, m := range x.Config.Models {
		ids = append(ids, m.ID)
	}
	sort.Strings(ids)
	return nil, gateway.Errorf(gateway.TypeNotFound, "no model %q in the registry (known: %v; model.list shows them)", a.ModelID, ids)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
