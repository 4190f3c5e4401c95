package authz

import (
	"errors"
	"strings"
	"testing"

	"github.com/cedar-policy/cedar-go/types"
)

// TestValidateForNames checks that unknown actions, entity types and
// attributes are refused with the nearest valid name and the policy's
// position, and that valid policies pass.
func TestValidateForNames(t *testing.T) {
	actions := []types.EntityUID{
		types.NewEntityUID("ATLASAction", "TASK_LIST"), types.NewEntityUID("ATLASAction", "TASK_CREATE"),
		types.NewEntityUID("Action", "echo"),
	}
	tests := []struct {
		name, text, want string
	}{
		{"action typo", "permit(principal, action, resource);\npermit(principal, action == ATLASAction::\"TASK_LST\", resource);",
			`p.cedar: line 2, column 1: policy policy1: unknown action ATLASAction::"TASK_LST"; did you mean ATLASAction::"TASK_LIST"?`},
		{"action in a list", `permit(principal, action in [Action::"echo", Action::"ecoh"], resource);`,
			`unknown action Action::"ecoh"; did you mean Action::"echo"?`},
		{"action far from any", `permit(principal, action == Action::"launch_rockets", resource);`,
			`unknown action Action::"launch_rockets"; no tool of the project has it`},
		{"catalogue actions are always known", `permit(principal, action == ATPAction::"invoke_hem", resource) when { context.hem_id == "h1" };`, ""},
		{"entity type in scope", `permit(principal == Agnet::"a", action == Action::"echo", resource);`,
			"line 1, column 1: policy policy0: unknown entity type Agnet in the principal scope; did you mean Agent?"},
		{"entity type in resource is", `permit(principal, action == Action::"echo", resource is Bookin);`,
			"unknown entity type Bookin in the resource scope; did you mean Booking?"},
		{"entity type in a condition", `permit(principal, action == Action::"echo", resource) when { resource in Projet::"p" };`,
			"unknown entity type Projet in a condition; did you mean Project?"},
		{"entity type in an is test", `permit(principal, action == Action::"echo", resource) when { principal is Agnet };`,
			"unknown entity type Agnet in an `is` test; did you mean Agent?"},
		{"action entity in a condition", `permit(principal, action, resource) when { action == Action::"echo" };`,
			`line 1, column 1: policy policy0: action Action::"echo" in a condition: constrain actions in the policy scope instead`},
		{"context attribute", `permit(principal, action == Action::"echo", resource) when { context.hem_idd == "" };`,
			"unknown attribute context.hem_idd; did you mean context.hem_id?"},
		{"context has", `permit(principal, action == Action::"echo", resource) when { context has bookingstate };`,
			"unknown attribute bookingstate in `context has bookingstate`; did you mean context.booking_state?"},
		{"principal attribute", `permit(principal, action == Action::"echo", resource) when { principal.name == "x" };`,
			"unknown attribute principal.name: the mesh's principal entities have no attributes"},
		{"type error still reported", `permit(principal, action == Action::"echo", resource) when { context.tool == 1 };`,
			"line 1, column 1: policy policy0: the types Long and String are not compatible"},
		{"annotated id and position", "// header\n  @id(\"lst\")\n  permit(principal, action == ATLASAction::\"TASK_LST\", resource);",
			`line 2, column 3: policy lst: unknown action`},
		{"valid", `permit(principal == Agent::"a", action in [ATLASAction::"TASK_LIST", Action::"echo"], resource in Project::"demo") when { context.booking_state == "" };`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAndValidateFor("p.cedar", tc.text, actions)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant it to contain %s", err, tc.want)
			}
		})
	}
}

// TestValidateLenientActions checks that without a list of actions (the
// mandate case) any action named in the scope is accepted, while the other
// names are still checked.
func TestValidateLenientActions(t *testing.T) {
	if _, err := ParseAndValidate("m", `permit(principal, action == ATLASAction::"TASK_LST", resource);`); err != nil {
		t.Fatalf("lenient refused: %v", err)
	}
	if _, err := ParseAndValidate("m", `permit(principal, action, resource) when { context.tol == "" };`); err == nil || !strings.Contains(err.Error(), "did you mean context.tool?") {
		t.Fatalf("lenient attribute = %v", err)
	}
	if _, err := ParseAndValidateFor("m", `permit(principal, action == ATLASAction::"TASK_LIST", resource);`, []types.EntityUID{}); err == nil {
		t.Fatal("an action of no tool passed with an empty action list")
	}
}

// TestSchemaWithoutCatalogue checks that the mesh's own schema knows no
// catalogue's names.
func TestSchemaWithoutCatalogue(t *testing.T) {
	UnregisterCatalogue("fixture")
	defer RegisterCatalogue(bookingFixture{})
	tests := []struct{ name, text, want string }{
		{"entity type", `permit(principal, action, resource is Booking);`, "unknown entity type Booking"},
		{"context attribute", `permit(principal, action, resource) when { context.hem_id == "" };`, "unknown attribute context.hem_id"},
		{"action", `permit(principal, action == ATPAction::"invoke_hem", resource);`, "unknown action"},
		{"mesh names", `permit(principal is Agent, action == Action::"echo", resource in Project::"p") when { context.tool == "echo" };`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAndValidateFor("p.cedar", tc.text, []types.EntityUID{types.NewEntityUID("Action", "echo")})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant it to contain %s", err, tc.want)
			}
		})
	}
}
