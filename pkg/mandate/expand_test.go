package mandate

import (
	"errors"
	"strings"
	"testing"

	"github.com/cedar-policy/cedar-go/types"
)

func TestPermitFrom(t *testing.T) {
	parent, err := ParsePolicies("parent", `permit(principal, action in [ATPAction::"a", ATPAction::"b"], resource in Project::"demo") when { context.booking_state == "PRE_JOURNEY" };
forbid(principal, action == ATPAction::"c", resource);`)
	if err != nil {
		t.Fatal(err)
	}
	b := types.NewEntityUID("ATPAction", "b")
	txt, err := PermitFrom(parent, b, "expansion-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`@id("expansion-1")`, `action == ATPAction::"b"`, `resource in Project::"demo"`, `context.booking_state == "PRE_JOURNEY"`} {
		if !strings.Contains(txt, want) {
			t.Errorf("PermitFrom = %s; lacks %s", txt, want)
		}
	}
	child, err := ParsePolicies("child", txt+"\nforbid(principal, action == ATPAction::\"c\", resource);")
	if err != nil {
		t.Fatalf("%s: %v", txt, err)
	}
	if err := CheckPolicyNarrowing(parent, child); err != nil {
		t.Fatalf("the expansion is not a narrowing of its parent: %v", err)
	}
	for _, wide := range []types.EntityUID{types.NewEntityUID("ATPAction", "c"), types.NewEntityUID("ATPAdminAction", "a")} {
		if _, err := PermitFrom(parent, wide, ""); !errors.Is(err, ErrTooWide) || !strings.Contains(err.Error(), wide.String()) {
			t.Errorf("PermitFrom(%s) = %v, want ErrTooWide naming it", wide, err)
		}
	}
}
