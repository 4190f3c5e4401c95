package atpauthz_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cedar-policy/cedar-go/types"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/services/atp/atpauthz"
)

// TestHEMEnumerated: with the ATP catalogue registered (TestMain), Issue
// refuses a mandate that permits invoke_hem without enumerating its hem_id
// values (seed decision MCP-D6), and accepts enumerated ones.
func TestHEMEnumerated(t *testing.T) {
	k, err := mandate.GenerateKey("demo")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 4, 7, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, policy string
		refused      bool
	}{
		{"HEM wildcard", `permit(principal, action == ATPAction::"invoke_hem", resource);`, true},
		{"HEM any action", `permit(principal, action, resource);`, true},
		{"HEM pattern", `permit(principal, action == ATPAction::"invoke_hem", resource) when { context.hem_id like "HEM-*" };`, true},
		{"HEM negated", `permit(principal, action == ATPAction::"invoke_hem", resource) unless { context.hem_id == "HEM-02" };`, true},
		{"enumerated", `permit(principal, action == ATPAction::"invoke_hem", resource) when { ["HEM-01", "HEM-MANDATE-01"].contains(context.hem_id) };`, false},
		{"one and a state", `permit(principal, action == ATPAction::"invoke_hem", resource) when { context.hem_id == "HEM-01" && context.booking_state == "JOURNEY" };`, false},
		{"other actions", `permit(principal, action == ATPAction::"get_context_package", resource);`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mandate.Issue(k, mandate.Claims{Subject: "a1", ExpiresAt: t0.Add(time.Hour).Unix(), Mandate: mandate.Grant{PolicySet: tc.policy}}, t0)
			if !tc.refused {
				if err != nil {
					t.Fatalf("Issue = %v", err)
				}
				return
			}
			if !errors.Is(err, atpauthz.ErrWildcardHEM) || !errors.Is(err, mandate.ErrPolicyRefused) || !strings.Contains(err.Error(), "hem_id") {
				t.Fatalf("Issue = %v, want ErrWildcardHEM (and mandate.ErrPolicyRefused) mentioning hem_id", err)
			}
		})
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
