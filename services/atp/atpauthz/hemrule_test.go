package atpauthz_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cedar-policy/cedar-go/types"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/services/atp/atpauthz"
)

// hemPolicies are policy sets for the HEM enumeration rule: refused ones
// name what the refusal must say (besides the policy's id).
var hemPolicies = []struct {
	name, policy string
	refused      string // "" accepted; else a phrase of the refusal
}{
	{"HEM wildcard", `permit(principal, action == ATPAction::"invoke_hem", resource);`, "does not enumerate"},
	{"HEM any action", `permit(principal, action, resource);`, "does not enumerate"},
	{"HEM among actions", `permit(principal, action in [ATPAction::"get_context_package", ATPAction::"invoke_hem"], resource);`, "does not enumerate"},
	{"HEM pattern", `permit(principal, action == ATPAction::"invoke_hem", resource) when { context.hem_id like "HEM-*" };`, "`like`"},
	// The two bypasses of issue 23: both admitted HEM-11.
	{"issue 23: like *1*", `permit(principal, action == ATPAction::"invoke_hem", resource) when { context.hem_id like "*1*" };`, "`like`"},
	{"issue 23: != and not like", `permit(principal, action == ATPAction::"invoke_hem", resource) when { context.hem_id != "" && !(context.hem_id like "*\0*") };`, "`!=`"},
	{"negated enumeration", `permit(principal, action == ATPAction::"invoke_hem", resource) when { !(context.hem_id == "HEM-02") };`, "`!`"},
	{"unless", `permit(principal, action == ATPAction::"invoke_hem", resource) unless { context.hem_id == "HEM-02" };`, "`unless`"},
	{"enumerated but unless", `permit(principal, action == ATPAction::"invoke_hem", resource) when { context.hem_id == "HEM-01" } unless { context.hem_id == "HEM-02" };`, "`unless`"},
	{"enumerated and a pattern", `permit(principal, action == ATPAction::"invoke_hem", resource) when { context.hem_id == "HEM-01" && context.hem_id like "*" };`, "`like`"},
	{"in a set (entity membership)", `permit(principal, action == ATPAction::"invoke_hem", resource) when { context.hem_id in ["HEM-01"] };`, "`in`"},
	{"a set of variables", `permit(principal, action == ATPAction::"invoke_hem", resource) when { [context.booking_state].contains(context.hem_id) };`, "`.contains`"},
	{"== another attribute", `permit(principal, action == ATPAction::"invoke_hem", resource) when { context.hem_id == context.booking_state };`, "`==`"},
	{"or true", `permit(principal, action == ATPAction::"invoke_hem", resource) when { context.hem_id == "HEM-01" || context.booking_state == "X" };`, "`||`"},
	{"if then else", `permit(principal, action == ATPAction::"invoke_hem", resource) when { if context.booking_state == "X" then context.hem_id == "HEM-01" else true };`, "`if … then … else`"},
	{"enumeration under an or of actions", `permit(principal, action, resource) when { action == ATPAction::"get_context_package" || context.hem_id == "HEM-01" };`, "`||`"},
	{"second policy", "permit(principal, action == ATPAction::\"get_context_package\", resource);\npermit(principal, action == ATPAction::\"invoke_hem\", resource) when { context.hem_id like \"*\" };", "policy1 (line 2)"},
	{"enumerated", `permit(principal, action == ATPAction::"invoke_hem", resource) when { ["HEM-01", "HEM-MANDATE-01"].contains(context.hem_id) };`, ""},
	{"equal", `permit(principal, action == ATPAction::"invoke_hem", resource) when { context.hem_id == "HEM-01" };`, ""},
	{"equal, literal first", `permit(principal, action == ATPAction::"invoke_hem", resource) when { "HEM-01" == context["hem_id"] };`, ""},
	{"or of equals", `permit(principal, action == ATPAction::"invoke_hem", resource) when { context.hem_id == "HEM-01" || context.hem_id == "HEM-02" };`, ""},
	{"one and a state", `permit(principal, action == ATPAction::"invoke_hem", resource) when { context.hem_id == "HEM-01" && context.booking_state == "JOURNEY" };`, ""},
	{"two when clauses", `permit(principal, action == ATPAction::"invoke_hem", resource) when { context.booking_state == "JOURNEY" } when { ["HEM-01"].contains(context.hem_id) };`, ""},
	{"has check", `permit(principal, action == ATPAction::"invoke_hem", resource) when { context has hem_id && context.hem_id == "HEM-01" };`, ""},
	{"a forbid may say anything", `forbid(principal, action == ATPAction::"invoke_hem", resource) when { context.hem_id like "*" };`, ""},
	{"other actions", `permit(principal, action == ATPAction::"get_context_package", resource);`, ""},
	{"all actions but HEM", `permit(principal, action, resource) when { action != ATPAction::"invoke_hem" };`, ""},
}

// TestHEMEnumerated: with the ATP catalogue registered (TestMain), Issue
// refuses a mandate that permits invoke_hem without enumerating its hem_id
// values with literals (seed decision MCP-D6, issue 23), naming the policy
// and what to write instead, and accepts enumerated ones.
func TestHEMEnumerated(t *testing.T) {
	k, err := mandate.GenerateKey("demo")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 4, 7, 12, 0, 0, 0, time.UTC)
	for _, tc := range hemPolicies {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mandate.Issue(k, mandate.Claims{Subject: "a1", ExpiresAt: t0.Add(time.Hour).Unix(), Mandate: mandate.Grant{PolicySet: tc.policy}}, t0)
			checkRefusal(t, err, tc.refused)
		})
	}
}

// checkRefusal: err is nil when refused is "", else a refusal saying
// refused and what to write instead.
func checkRefusal(t *testing.T, err error, refused string) {
	t.Helper()
	if refused == "" {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	if !errors.Is(err, atpauthz.ErrWildcardHEM) || !errors.Is(err, mandate.ErrPolicyRefused) {
		t.Fatalf("err = %v, want ErrWildcardHEM (and mandate.ErrPolicyRefused)", err)
	}
	for _, want := range []string{refused, "policy", `context.hem_id == "HEM-01"`, ".contains(context.hem_id)"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want it to say %q", err, want)
		}
	}
}

// TestHEMEnumeratedNarrowAndVerify: the rule holds when a mandate is
// narrowed, and the gate refuses a token that was signed without it (a
// hand-made token) and would permit HEM-11, before any policy runs.
func TestHEMEnumeratedNarrowAndVerify(t *testing.T) {
	k, err := mandate.GenerateKey("demo")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 4, 7, 12, 0, 0, 0, time.UTC)
	parentTok, err := mandate.Issue(k, mandate.Claims{Subject: "a1", ExpiresAt: t0.Add(time.Hour).Unix(),
		Mandate: mandate.Grant{PolicySet: `permit(principal, action == ATPAction::"invoke_hem", resource) when { ["HEM-01", "HEM-11"].contains(context.hem_id) };`}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	v := &mandate.Verifier{Keys: mandate.StaticKeys{k}, Now: func() time.Time { return t0 }}
	parent, err := v.Verify(context.Background(), parentTok, mandate.IssuerName("demo"))
	if err != nil {
		t.Fatal(err)
	}
	// A child repeats its parent's condition (mandate.CheckNarrowing) and
	// adds its own; the rule sees the added terms too.
	const parentCond = `["HEM-01", "HEM-11"].contains(context.hem_id)`
	for _, tc := range []struct{ name, cond, refused string }{
		{"like *1*", `context.hem_id like "*1*"`, "`like`"},
		{"!= and not like", `context.hem_id != "" && !(context.hem_id like "*\0*")`, "`!=`"},
		{"an equal", `context.hem_id == "HEM-11"`, ""},
	} {
		t.Run("narrow/"+tc.name, func(t *testing.T) {
			_, err := mandate.Narrow(k, parent, mandate.Claims{Subject: "a2", ExpiresAt: t0.Add(time.Minute).Unix(), Mandate: mandate.Grant{
				PolicySet: `permit(principal, action == ATPAction::"invoke_hem", resource) when { ` + parentCond + ` } when { ` + tc.cond + ` };`}}, t0)
			checkRefusal(t, err, tc.refused)
		})
	}

	store := authz.NewMemoryStore()
	ctx := context.Background()
	if _, err := store.PutPolicies(ctx, "demo", `permit(principal, action, resource);`); err != nil {
		t.Fatal(err)
	}
	gate, err := authz.NewGate(authz.GateConfig{Policies: store, Keys: mandate.StaticKeys{k}, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	req := func(tok, hemID string) *authz.Request {
		return &authz.Request{Version: "v1r3", Project: "demo", Channel: "main", AgentID: "a1", ToolName: "atp_invoke_hem",
			Action: atpauthz.HEMAction, Arguments: []byte(`{"hem_id":"` + hemID + `"}`), Mandate: tok}
	}
	for _, tc := range hemPolicies[4:6] { // the two bypasses of the issue
		t.Run("verify/"+tc.name, func(t *testing.T) {
			mandate.UnregisterPolicyCheck(atpauthz.Name) // sign as a tool that does not know the rule would
			tok, err := mandate.Issue(k, mandate.Claims{Subject: "a1", ExpiresAt: t0.Add(time.Hour).Unix(), Mandate: mandate.Grant{PolicySet: tc.policy}}, t0)
			atpauthz.Register()
			if err != nil {
				t.Fatal(err)
			}
			d, err := gate.Decide(ctx, req(tok, "HEM-11"))
			if err == nil && d.Allowed {
				t.Fatalf("the gate ran HEM-11 with %s: %+v", tc.policy, d)
			}
			if err != nil && !errors.Is(err, atpauthz.ErrWildcardHEM) {
				t.Fatalf("Decide = %v, want ErrWildcardHEM", err)
			}
			if err == nil && !strings.Contains(d.Reason+d.Message, "hem_id") {
				t.Fatalf("denied %+v without saying why", d)
			}
		})
	}
	// An enumerated mandate still runs the HEMs it lists, and only those.
	for hemID, want := range map[string]bool{"HEM-11": true, "HEM-12": false} {
		d, err := gate.Decide(ctx, req(parentTok, hemID))
		if err != nil || d.Allowed != want {
			t.Fatalf("%s: %+v, %v; want allowed %v", hemID, d, err, want)
		}
	}
}

// TestDemoGrant: the demo policy grants the served tools plainly and
// invoke_hem only for DemoHEMID.
func TestDemoGrant(t *testing.T) {
	get := types.NewEntityUID("ATPAction", "get_context_package")
	for _, tc := range []struct {
		name    string
		actions []types.EntityUID
		want    []string
		not     []string
	}{
		{"with invoke_hem", []types.EntityUID{atpauthz.HEMAction, get},
			[]string{`permit(principal, action in [ATPAction::"get_context_package"], resource in Project::"demo");`,
				"@id(\"demo-hem\")\npermit(principal, action == ATPAction::\"invoke_hem\", resource in Project::\"demo\")\nwhen { [\"HEM-MANDATE-01\"].contains(context.hem_id) };\n"}, nil},
		{"without", []types.EntityUID{get}, []string{`ATPAction::"get_context_package"`}, []string{"demo-hem"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := authz.DemoPolicy("", tc.actions)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("DemoPolicy lacks %q:\n%s", w, got)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("DemoPolicy has %q:\n%s", n, got)
				}
			}
		})
	}
}
