package mandate

import (
	"fmt"
	"strings"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	"github.com/cedar-policy/cedar-go/x/exp/ast"
)

// PermitFrom returns the Cedar text of a policy that permits action and
// nothing parent does not: a copy of the first permit of parent (in text
// order) whose action scope covers action, with the action scope narrowed
// to `action == <action>` and every other part (principal, resource,
// conditions) kept, annotated @id(id). It is how a mandate expansion
// (ATP's HEM-MANDATE-01, seed MCP-D15) adds the one action a sub-mandate
// lacks without ever granting more than the parent's own mandate. The
// error wraps ErrTooWide when no permit of parent covers action.
func PermitFrom(parent *cedar.PolicySet, action types.EntityUID, id string) (string, error) {
	var permits []idPolicy
	for pid, p := range parent.All() {
		if p.Effect() == cedar.Permit {
			permits = append(permits, idPolicy{pid, (*ast.Policy)(p.AST())})
		}
	}
	sortPolicies(permits)
	want := ast.ScopeTypeEq{Entity: action}
	for _, p := range permits {
		if !covScope(p.p.Action, want) {
			continue
		}
		q := *p.p
		q.Annotations = nil
		q.Action = want
		txt := policyText(&q)
		if id != "" {
			txt = fmt.Sprintf("@id(%q)\n%s", id, txt)
		}
		return txt, nil
	}
	var grants []string
	for _, p := range permits {
		grants = append(grants, scopeText(p.p.Action, "action"))
	}
	have := "no permit"
	if len(grants) > 0 {
		have = "permits for " + strings.Join(grants, "; ")
	}
	return "", fmt.Errorf("%w: the parent mandate permits no %s (it has %s)", ErrTooWide, action, have)
}
