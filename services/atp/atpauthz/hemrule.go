package atpauthz

import (
	"errors"
	"fmt"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	"github.com/cedar-policy/cedar-go/x/exp/ast"
	"github.com/cedar-policy/cedar-go/x/exp/eval"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/mandate"
)

// HEMAction is the Cedar action of atp_invoke_hem, whose mandates must
// enumerate hem_id values.
var HEMAction = types.NewEntityUID("ATPAction", "invoke_hem")

// ErrWildcardHEM: a mandate permits invoke_hem without enumerating its
// hem_id values with literals. Through mandate.CheckPolicies it also wraps
// mandate.ErrPolicyRefused.
var ErrWildcardHEM = errors.New("atpauthz: HEM_INVOKE without enumerated hem_id values")

var _ mandate.PolicyCheck = (*Catalogue)(nil)

// CheckPolicies implements mandate.PolicyCheck with ATP's rule
// (CheckHEMEnumerated); authz.RegisterCatalogue registers it, and
// mandate.Issue, mandate.Narrow and the gate's verification run it.
func (c *Catalogue) CheckPolicies(ps *cedar.PolicySet) error { return CheckHEMEnumerated(ps) }

// hemFix is what a refusal tells the author to write instead.
const hemFix = "write `when { context.hem_id == \"HEM-01\" }` or `when { [\"HEM-01\", \"HEM-02\"].contains(context.hem_id) }` (literal values only)"

// CheckHEMEnumerated refuses (ErrWildcardHEM) a policy set with a permit
// policy that can apply to HEMAction unless the policy enumerates hem_id
// with literal values (seed decision MCP-D6, issue 23): one of its `when`
// conditions, or a top-level `&&` term of one, is
//
//	context.hem_id == "HEM-01"                       (either side)
//	["HEM-01", "HEM-02"].contains(context.hem_id)    (a set of string literals)
//	a || of such terms
//
// and context.hem_id appears nowhere else in the policy: `like`, `!=`,
// `!`, `unless`, `in` (Cedar's `in` compares entities, never strings),
// ordering, if-then-else or any other shape is refused, because the value
// set such an expression admits is not the list a reader sees (`like
// "*1*"`, or `!= "" && !(like "*\0*")`, admitted every HEM). Whether a
// policy can apply to HEMAction is decided by partial evaluation with
// every variable but the action unknown; a policy that evaluation cannot
// rule out is checked.
func CheckHEMEnumerated(ps *cedar.PolicySet) error {
	for id, p := range ps.All() {
		if p.Effect() != cedar.Permit {
			continue
		}
		if applies(p) {
			if err := checkEnumerated((*ast.Policy)(p.AST())); err != "" {
				pos := p.Position()
				return fmt.Errorf("%w: policy %s (line %d) permits %s but %s; %s",
					ErrWildcardHEM, id, pos.Line, HEMAction, err, hemFix)
			}
		}
	}
	return nil
}

// applies is false only when p evaluates to false for HEMAction whatever
// the principal, resource and context (hem_id included) are.
func applies(p *cedar.Policy) (keep bool) {
	defer func() {
		if recover() != nil {
			keep = true
		}
	}()
	env := eval.Env{
		Entities:  types.EntityMap{},
		Principal: eval.Variable("principal"),
		Action:    HEMAction,
		Resource:  eval.Variable("resource"),
		Context:   eval.Variable("context"),
	}
	_, keep = eval.PartialPolicy(env, (*ast.Policy)(p.AST()))
	return keep
}

// checkEnumerated returns "" when p enumerates hem_id with literals only,
// else what is wrong (for the refusal message).
func checkEnumerated(p *ast.Policy) string {
	enumerated := false
	for _, c := range p.Conditions {
		if c.Condition == ast.ConditionUnless {
			if mentionsHEMID(c.Body) {
				return "tests context.hem_id in an `unless` condition (a negation admits every other hem_id)"
			}
			continue
		}
		for _, term := range conjuncts(c.Body) {
			if isEnumeration(term) {
				enumerated = true
				continue
			}
			if what := misuse(term); what != "" {
				return "tests context.hem_id with " + what
			}
		}
	}
	if !enumerated {
		return "does not enumerate context.hem_id"
	}
	return ""
}

// conjuncts flattens the top-level && of n.
func conjuncts(n ast.IsNode) []ast.IsNode {
	if a, ok := n.(ast.NodeTypeAnd); ok {
		return append(conjuncts(a.Left), conjuncts(a.Right)...)
	}
	return []ast.IsNode{n}
}

// isEnumeration: n is context.hem_id == "lit", "lit" == context.hem_id,
// [literals].contains(context.hem_id), or a || of those.
func isEnumeration(n ast.IsNode) bool {
	switch n := n.(type) {
	case ast.NodeTypeOr:
		return isEnumeration(n.Left) && isEnumeration(n.Right)
	case ast.NodeTypeEquals:
		return (isHEMID(n.Left) && isStringLiteral(n.Right)) || (isHEMID(n.Right) && isStringLiteral(n.Left))
	case ast.NodeTypeContains:
		return isHEMID(n.Right) && isStringSet(n.Left)
	}
	return false
}

// misuse names the expression in n that reads context.hem_id, or an
// enumeration of it, in a shape other than an enumeration (n is not one),
// or "" when n does not read it.
func misuse(n ast.IsNode) string {
	var walk func(x, parent ast.IsNode) string
	walk = func(x, parent ast.IsNode) string {
		if isHEMID(x) || isEnumeration(x) {
			return describe(parent)
		}
		for _, c := range children(x) {
			if what := walk(c, x); what != "" {
				return what
			}
		}
		return ""
	}
	return walk(n, nil)
}

// children are n's direct operands.
func children(n ast.IsNode) []ast.IsNode {
	var out []ast.IsNode
	first := true
	ast.Inspect(ast.NewNode(n), func(x ast.IsNode) bool {
		if first {
			first = false
			return true
		}
		out = append(out, x)
		return false
	})
	return out
}

// describe names the expression p that reads context.hem_id.
func describe(p ast.IsNode) string {
	switch p.(type) {
	case ast.NodeTypeLike:
		return "`like` (a pattern admits hem_ids nobody listed)"
	case ast.NodeTypeNotEquals:
		return "`!=` (admits every other hem_id)"
	case ast.NodeTypeNot:
		return "`!` (a negation admits every other hem_id)"
	case ast.NodeTypeIn:
		return "`in` (Cedar's `in` compares entities, never strings)"
	case ast.NodeTypeEquals:
		return "`==` on a value that is not a string literal"
	case ast.NodeTypeContains:
		return "`.contains` on a set that is not of string literals only"
	case ast.NodeTypeOr:
		return "`||` joining a term that is not an enumeration"
	case ast.NodeTypeIfThenElse:
		return "`if … then … else` (each branch must enumerate; write one enumeration)"
	case nil:
		return "no comparison (a bare attribute)"
	default:
		return "an expression other than `==` a literal or `[literals].contains(...)`"
	}
}

// mentionsHEMID: n reads context.hem_id somewhere.
func mentionsHEMID(n ast.IsNode) bool {
	found := false
	ast.Inspect(ast.NewNode(n), func(x ast.IsNode) bool {
		found = found || isHEMID(x)
		return !found
	})
	return found
}

// isHEMID: n is context.hem_id (or context["hem_id"]).
func isHEMID(n ast.IsNode) bool {
	a, ok := n.(ast.NodeTypeAccess)
	if !ok || a.Value != AttrHEMID {
		return false
	}
	v, ok := a.Arg.(ast.NodeTypeVariable)
	return ok && v.Name == "context"
}

func isStringLiteral(n ast.IsNode) bool {
	v, ok := n.(ast.NodeValue)
	if !ok {
		return false
	}
	_, ok = v.Value.(types.String)
	return ok
}

// isStringSet: n is a non-empty set of string literals.
func isStringSet(n ast.IsNode) bool {
	switch n := n.(type) {
	case ast.NodeTypeSet:
		for _, e := range n.Elements {
			if !isStringLiteral(e) {
				return false
			}
		}
		return len(n.Elements) > 0
	case ast.NodeValue:
		s, ok := n.Value.(types.Set)
		if !ok || s.Len() == 0 {
			return false
		}
		all := true
		for v := range s.All() {
			if _, ok := v.(types.String); !ok {
				all = false
			}
		}
		return all
	}
	return false
}

// DemoHEMID is the only hem_id the demo policy of `utpmesh up` grants
// (when an invoke_hem tool is served).
const DemoHEMID = "HEM-MANDATE-01"

var _ authz.DemoGranter = (*Catalogue)(nil)

// DemoGrant implements authz.DemoGranter: the demo grants invoke_hem only
// for DemoHEMID (a mandate permitting it must enumerate its hem_ids).
func (c *Catalogue) DemoGrant(principal string, action types.EntityUID) (string, bool) {
	if action != HEMAction {
		return "", false
	}
	return fmt.Sprintf("@id(\"demo-hem\")\npermit(%s, action == %s, resource in Project::%q)\nwhen { [%q].contains(context.%s) };\n",
		principal, HEMAction, authz.DemoProject, DemoHEMID, AttrHEMID), true
}
