package authz

import (
	"errors"
	"strings"
	"testing"

	"github.com/cedar-policy/cedar-go"
)

// TestExplainParseError checks the words and positions given for typical
// mistakes in Cedar text.
func TestExplainParseError(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"missing semicolon between policies", "permit(principal, action, resource)\npermit(principal, action, resource);",
			"line 1, column 36: missing ';' at the end of the policy that starts at line 1, column 1 (the next policy starts at line 2, column 1)"},
		{"missing semicolon at the end", "permit(principal, action, resource)",
			"line 1, column 36: missing ';' at the end of the policy that starts at line 1, column 1"},
		{"scope not closed", "permit(principal, action, resource",
			"line 1, column 35: expected ')' to close the '(' at line 1, column 7, but the policy text ended"},
		{"unbalanced parens in a condition", "permit(principal, action, resource)\nwhen { (context.tool == \"x\" };",
			"line 2, column 29: expected ')' to close the '(' at line 2, column 8, found '}'"},
		{"unknown keyword", "permit(principal, action, resource) whenn { true };",
			"line 1, column 37: unknown keyword 'whenn' after the policy scope; expected 'when { … }', 'unless { … }' or ';' (did you mean 'when'?)"},
		{"missing effect", "(principal, action, resource);",
			"line 1, column 1: a policy starts with 'permit' or 'forbid' (after optional @annotations), found '('"},
		{"misspelt effect", "permitt(principal, action, resource);",
			"line 1, column 1: a policy starts with 'permit' or 'forbid' (after optional @annotations), found 'permitt' (did you mean 'permit'?)"},
		{"stray brace", "permit(principal, action, resource) when { true } };",
			"line 1, column 51: stray '}' with nothing open to close; remove it"},
		{"dangling operator", "permit(principal, action, resource) when { true && };",
			"line 1, column 52: expected an expression after '&&', found '}'"},
		{"unknown name", "permit(principal, action, resource) when { contxt.tool == \"x\" };",
			"line 1, column 44: unknown name 'contxt'; an expression starts with principal, action, resource, context, a literal or Type::\"id\" (did you mean 'context'?)"},
		{"unterminated string", "permit(principal, action, resource) when { context.tool == \"x };",
			"line 1, column 60: the string starting here is not closed"},
		{"missing comma in scope", "permit(principal action, resource);",
			"line 1, column 18: expected ',', found 'action'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := syntaxError(tc.text)
			if err == nil {
				t.Fatalf("%q parsed", tc.text)
			}
			got := ExplainParseError(tc.text, err)
			if !strings.Contains(got, tc.want) {
				t.Fatalf("explained %q as\n  %s\nwant it to contain\n  %s\n(cedar-go said: %v)", tc.text, got, tc.want, err)
			}
			if strings.Contains(got, "exact got") {
				t.Fatalf("cedar-go's wording leaked: %s", got)
			}
		})
	}
	if ExplainParseError("x", nil) != "" {
		t.Fatal("nil error explained")
	}
	if got := ExplainParseError("x", errors.New("something else")); !strings.Contains(got, "something else") {
		t.Fatalf("unrecognised error = %q", got)
	}
}

// TestParseAndValidateExplains checks that ParseAndValidate returns the
// explained message wrapped in ErrInvalidPolicy.
func TestParseAndValidateExplains(t *testing.T) {
	_, err := ParseAndValidate("policies.cedar", "permit(principal, action, resource)\npermit(principal, action, resource);")
	if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "policies.cedar: line 1, column 36: missing ';'") {
		t.Fatalf("err = %v", err)
	}
}

// FuzzExplainParseError checks that any text cedar-go refuses gets a
// message that starts with a position (or says it cannot parse) and never
// panics.
func FuzzExplainParseError(f *testing.F) {
	for _, s := range []string{
		"permit(principal, action, resource)", "permit(principal, action, resource",
		"(principal, action, resource);", "permit(principal, action, resource) when { (1 };",
		"@id(\"x\") forbid(principal, action, resource) unless { context.tool like \"a*\" };",
		"permit(principal, action, resource) when { \"x };", "/* x", "permit(principal in [Agent::\"a\" Agent::\"b\"], action, resource);",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if _, err := cedar.NewPolicyListFromBytes("p", []byte(text)); err != nil {
			got := ExplainParseError(text, err)
			if got == "" || (!strings.HasPrefix(got, "line ") && !strings.HasPrefix(got, "cannot parse")) {
				t.Fatalf("ExplainParseError(%q, %v) = %q", text, err, got)
			}
		}
	})
}
