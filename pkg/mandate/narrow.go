package mandate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cedar-policy/cedar-go"
	cast "github.com/cedar-policy/cedar-go/ast"
	"github.com/cedar-policy/cedar-go/types"
	"github.com/cedar-policy/cedar-go/x/exp/ast"
)

// CheckNarrowing reports whether child is provably no broader than parent
// (see the package doc for the rules). The error wraps ErrTooWide and
// names the first child policy or claim that is too wide.
func CheckNarrowing(parent, child *Mandate) error {
	pc, cc := &parent.Claims, &child.Claims
	if cc.Issuer != pc.Issuer {
		return fmt.Errorf("%w: issuer %q differs from the parent's %q", ErrTooWide, cc.Issuer, pc.Issuer)
	}
	if cc.ExpiresAt > pc.ExpiresAt {
		return fmt.Errorf("%w: exp %s is after the parent's %s", ErrTooWide,
			time.Unix(cc.ExpiresAt, 0).UTC().Format(time.RFC3339), time.Unix(pc.ExpiresAt, 0).UTC().Format(time.RFC3339))
	}
	if pc.Resource != nil && (cc.Resource == nil || *cc.Resource != *pc.Resource) {
		return fmt.Errorf("%w: the parent is bound to resource %s (booking_object_id), the child must be bound to the same resource (got %s)", ErrTooWide, *pc.Resource, resourceString(cc.Resource))
	}
	want := append(slices.Clone(pc.ParentChain), pc.JTI)
	if !slices.Equal(cc.ParentChain, want) {
		return fmt.Errorf("%w: parent_chain is %v, want %v (the parent's chain and its jti)", ErrTooWide, cc.ParentChain, want)
	}
	return CheckPolicyNarrowing(parent.Policies, child.Policies)
}

func resourceString(b *string) string {
	if b == nil {
		return "null"
	}
	return *b
}

// CheckPolicyNarrowing reports whether the child policy set permits no
// more than the parent's: every child permit is covered by a parent permit
// and every parent forbid is repeated in the child.
func CheckPolicyNarrowing(parent, child *cedar.PolicySet) error {
	var permits, forbids []idPolicy
	for id, p := range parent.All() {
		if p.Effect() == cedar.Permit {
			permits = append(permits, idPolicy{id, (*ast.Policy)(p.AST())})
		} else {
			forbids = append(forbids, idPolicy{id, (*ast.Policy)(p.AST())})
		}
	}
	sortPolicies(permits)
	sortPolicies(forbids)
	var childForbids, childPermits []idPolicy
	for id, p := range child.All() {
		if p.Effect() == cedar.Forbid {
			childForbids = append(childForbids, idPolicy{id, (*ast.Policy)(p.AST())})
		} else {
			childPermits = append(childPermits, idPolicy{id, (*ast.Policy)(p.AST())})
		}
	}
	sortPolicies(childPermits)
	for _, f := range forbids {
		if !slices.ContainsFunc(childForbids, func(c idPolicy) bool { return samePolicy(f.p, c.p) }) {
			return fmt.Errorf("%w: the parent's forbid policy %s (line %d) is missing from the child; a sub-mandate must repeat every forbid of its parent: %s",
				ErrTooWide, f.id, f.p.Position.Line, policyText(f.p))
		}
	}
	for _, c := range childPermits {
		var reasons []string
		covered := false
		for _, p := range permits {
			r := covers(p.p, c.p)
			if r == "" {
				covered = true
				break
			}
			reasons = append(reasons, fmt.Sprintf("parent %s: %s", p.id, r))
		}
		if !covered {
			why := "the parent permits nothing"
			if len(reasons) > 0 {
				why = strings.Join(reasons, "; ")
			}
			return fmt.Errorf("%w: child policy %s (line %d) is too wide: %s (%s)", ErrTooWide, c.id, c.p.Position.Line, policyText(c.p), why)
		}
	}
	return nil
}

type idPolicy struct {
	id cedar.PolicyID
	p  *ast.Policy
}

func sortPolicies(ps []idPolicy) {
	slices.SortFunc(ps, func(a, b idPolicy) int {
		if a.p.Position.Offset != b.p.Position.Offset {
			return a.p.Position.Offset - b.p.Position.Offset
		}
		return strings.Compare(string(a.id), string(b.id))
	})
}

// policyText renders p on one line, without annotations.
func policyText(p *ast.Policy) string {
	q := *p
	q.Annotations = nil
	txt := string(cedar.NewPolicyFromAST((*cast.Policy)(&q)).MarshalCedar())
	return strings.Join(strings.Fields(txt), " ")
}

// samePolicy compares effect, scope and conditions (not annotations or
// positions).
func samePolicy(a, b *ast.Policy) bool {
	if a.Effect != b.Effect || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	if !sameScope(a.Principal, b.Principal) || !sameScope(a.Action, b.Action) || !sameScope(a.Resource, b.Resource) {
		return false
	}
	for i := range a.Conditions {
		if a.Conditions[i].Condition != b.Conditions[i].Condition || !ast.Equal(ast.NewNode(a.Conditions[i].Body), ast.NewNode(b.Conditions[i].Body)) {
			return false
		}
	}
	return true
}

func sameScope(a, b ast.IsScopeNode) bool {
	return covScope(a, b) && covScope(b, a)
}

// covers returns "" when permit policy p permits every request child
// permits, or the reason it cannot be shown.
func covers(p, child *ast.Policy) string {
	if !covScope(p.Principal, child.Principal) {
		return fmt.Sprintf("principal: parent permits %s, child %s", scopeText(p.Principal, "principal"), scopeText(child.Principal, "principal"))
	}
	if !covScope(p.Action, child.Action) {
		return fmt.Sprintf("action: parent permits %s, child %s", scopeText(p.Action, "action"), scopeText(child.Action, "action"))
	}
	if !covScope(p.Resource, child.Resource) {
		return fmt.Sprintf("resource: parent permits %s, child %s", scopeText(p.Resource, "resource"), scopeText(child.Resource, "resource"))
	}
	for _, pc := range p.Conditions {
		found := slices.ContainsFunc(child.Conditions, func(cc ast.ConditionType) bool {
			return cc.Condition == pc.Condition && ast.Equal(ast.NewNode(cc.Body), ast.NewNode(pc.Body))
		})
		if !found {
			kw := "when"
			if pc.Condition == ast.ConditionUnless {
				kw = "unless"
			}
			one := ast.Permit()
			one.Conditions = []ast.ConditionType{pc}
			txt := policyText(one)
			if i := strings.Index(txt, kw); i >= 0 {
				txt = txt[i:]
			}
			return fmt.Sprintf("the child must repeat the parent's condition %s", txt)
		}
	}
	return ""
}

// covScope reports whether scope p matches every request scope c matches.
func covScope(p, c ast.IsScopeNode) bool {
	switch ps := p.(type) {
	case ast.ScopeTypeAll:
		return true
	case ast.ScopeTypeEq:
		cs, ok := c.(ast.ScopeTypeEq)
		return ok && cs.Entity == ps.Entity
	case ast.ScopeTypeIn:
		switch cs := c.(type) {
		case ast.ScopeTypeEq:
			return cs.Entity == ps.Entity
		case ast.ScopeTypeIn:
			return cs.Entity == ps.Entity
		case ast.ScopeTypeIsIn:
			return cs.Entity == ps.Entity
		case ast.ScopeTypeInSet:
			return len(cs.Entities) > 0 && !slices.ContainsFunc(cs.Entities, func(e types.EntityUID) bool { return e != ps.Entity })
		}
	case ast.ScopeTypeInSet:
		switch cs := c.(type) {
		case ast.ScopeTypeEq:
			return slices.Contains(ps.Entities, cs.Entity)
		case ast.ScopeTypeIn:
			return slices.Contains(ps.Entities, cs.Entity)
		case ast.ScopeTypeInSet:
			for _, e := range cs.Entities {
				if !slices.Contains(ps.Entities, e) {
					return false
				}
			}
			return true
		}
	case ast.ScopeTypeIs:
		switch cs := c.(type) {
		case ast.ScopeTypeIs:
			return cs.Type == ps.Type
		case ast.ScopeTypeIsIn:
			return cs.Type == ps.Type
		case ast.ScopeTypeEq:
			return cs.Entity.Type == ps.Type
		}
	case ast.ScopeTypeIsIn:
		switch cs := c.(type) {
		case ast.ScopeTypeIsIn:
			return cs.Type == ps.Type && cs.Entity == ps.Entity
		case ast.ScopeTypeEq:
			// An entity equal to the parent's ancestor is not of its type
			// unless it is that very entity; refuse what needs entities.
			return false
		}
	}
	return false
}

// scopeText renders a scope for a message.
func scopeText(s ast.IsScopeNode, v string) string {
	switch n := s.(type) {
	case ast.ScopeTypeAll:
		return "any " + v
	case ast.ScopeTypeEq:
		return v + " == " + n.Entity.String()
	case ast.ScopeTypeIn:
		return v + " in " + n.Entity.String()
	case ast.ScopeTypeInSet:
		parts := make([]string, len(n.Entities))
		for i, e := range n.Entities {
			parts[i] = e.String()
		}
		return v + " in [" + strings.Join(parts, ", ") + "]"
	case ast.ScopeTypeIs:
		return v + " is " + string(n.Type)
	case ast.ScopeTypeIsIn:
		return v + " is " + string(n.Type) + " in " + n.Entity.String()
	}
	return fmt.Sprintf("%s %T", v, s)
}

// Narrow issues a sub-mandate of parent, signed by key, after checking that
// it is no broader (CheckNarrowing). parent must have been verified. In
// child, an empty iss, exp or booking_object_id is taken from the parent;
// parent_chain is set to the parent's chain plus its jti.
func Narrow(key *IssuerKey, parent *Mandate, child Claims, now time.Time) (string, error) {
	if parent == nil {
		return "", fmt.Errorf("%w: no parent mandate", ErrInvalidClaims)
	}
	if child.Issuer == "" {
		child.Issuer = parent.Claims.Issuer
	}
	if child.ExpiresAt == 0 {
		child.ExpiresAt = parent.Claims.ExpiresAt
	}
	if child.Resource == nil && parent.Claims.Resource != nil {
		b := *parent.Claims.Resource
		child.Resource = &b
	}
	child.ParentChain = append(slices.Clone(parent.Claims.ParentChain), parent.Claims.JTI)
	if child.IssuedAt == 0 {
		child.IssuedAt = now.Unix()
	}
	if child.ATPVersion == "" {
		child.ATPVersion = parent.Claims.ATPVersion
	}
	if child.Mandate.RARFormat == "" {
		child.Mandate.RARFormat = RARFormat
	}
	if child.JTI == "" {
		child.JTI = "pending"
	}
	ps, err := checkClaims(&child)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidClaims, err)
	}
	if child.JTI == "pending" {
		child.JTI = ""
	}
	if err := CheckNarrowing(parent, &Mandate{Claims: child, Policies: ps}); err != nil {
		return "", err
	}
	return Issue(key, child, now)
}
