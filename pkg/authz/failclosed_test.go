package authz

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cedar-policy/cedar-go/types"

	"github.com/utpmesh/utpmesh/pkg/mandate"
)

// TestGateFailsClosedOnUnevaluatedForbid: a forbid policy on a context
// attribute the evaluating process does not know (its catalogue is not
// registered there, as in a worker built with the SDK) cannot be
// evaluated; the gate denies the call and names the policy and the
// attribute, whether the forbid is the project's or the mandate's. A
// permit that cannot be evaluated only permits less, and a forbid
// guarded with `has` evaluates.
func TestGateFailsClosedOnUnevaluatedForbid(t *testing.T) {
	ctx := context.Background()
	key, err := mandate.GenerateKey("demo")
	if err != nil {
		t.Fatal(err)
	}
	const permitEcho = `@id("echo") permit(principal, action == Action::"echo", resource);` + "\n"
	const forbidHEM = `@id("no-hem") forbid(principal, action, resource) when { context.hem_id == "HEM-9" };` + "\n"
	tests := []struct {
		name, project, mandate string
		// known: the fixture catalogue (which declares hem_id) is
		// registered while the gate decides.
		known      bool
		allowed    bool
		reason     string
		policy     string
		msgContain string
	}{
		{"project forbid, attribute unknown", permitEcho + forbidHEM, "", false,
			false, ReasonProjectPolicy, "project:no-hem", "forbid policy no-hem (line 2): unknown attribute context.hem_id"},
		{"project forbid, attribute known", permitEcho + forbidHEM, "", true,
			true, ReasonMandateNotRequired, "project:echo", ""},
		{"project forbid guarded with has", permitEcho + `forbid(principal, action, resource) when { context has hem_id && context.hem_id == "HEM-9" };`, "", false,
			true, ReasonMandateNotRequired, "project:echo", ""},
		{"permit on an unknown attribute", permitEcho + `permit(principal, action, resource) when { context.hem_id == "" };`, "", false,
			true, ReasonMandateNotRequired, "project:echo", ""},
		{"mandate forbid, attribute unknown", permitEcho, permitEcho + forbidHEM, false,
			false, ReasonScopeViolation, "mandate:no-hem", "forbid policy no-hem (line 2): unknown attribute context.hem_id"},
		{"mandate forbid, attribute known", permitEcho, permitEcho + forbidHEM, true,
			true, ReasonAllowed, "mandate:echo", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := NewMemoryStore()
			if _, err := store.PutPolicies(ctx, "demo", tc.project); err != nil {
				t.Fatal(err)
			}
			req := &Request{Project: "demo", AgentID: "agent-1", ToolName: "echo", Action: types.NewEntityUID("Action", "echo")}
			if tc.mandate == "" {
				if err := store.PutConfig(ctx, "demo", ProjectConfig{Mandate: MandateNotRequired}); err != nil {
					t.Fatal(err)
				}
			} else {
				now := time.Now()
				if req.Mandate, err = mandate.Issue(key, mandate.Claims{Subject: "agent-1", ExpiresAt: now.Add(time.Hour).Unix(),
					Mandate: mandate.Grant{PolicySet: tc.mandate}}, now); err != nil {
					t.Fatal(err)
				}
			}
			g, err := NewGate(GateConfig{Policies: store, Keys: mandate.StaticKeys{key}})
			if err != nil {
				t.Fatal(err)
			}
			if !tc.known {
				UnregisterCatalogue("fixture")
				defer RegisterCatalogue(bookingFixture{})
			}
			d, err := g.Decide(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != tc.allowed || d.Reason != tc.reason || !slices.Contains(d.Policies, tc.policy) || !strings.Contains(d.Message, tc.msgContain) {
				t.Fatalf("decision = allowed %v, reason %s, policies %v, message %q\nwant allowed %v, reason %s, policies with %s, message with %q",
					d.Allowed, d.Reason, d.Policies, d.Message, tc.allowed, tc.reason, tc.policy, tc.msgContain)
			}
		})
	}
}
