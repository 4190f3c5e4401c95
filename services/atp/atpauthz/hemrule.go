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
// hem_id values. Through mandate.CheckPolicies it also wraps
// mandate.ErrPolicyRefused.
var ErrWildcardHEM = errors.New("atpauthz: HEM_INVOKE without enumerated hem_id values")

// hemProbes are hem_id values no real mandate lists: a policy that still
// permits invoke_hem with one of them does not enumerate its hem_ids.
var hemProbes = []string{"", "HEM-\x00utpmesh-wildcard-probe", "\x00utpmesh-wildcard-probe"}

var _ mandate.PolicyCheck = (*Catalogue)(nil)

// CheckPolicies implements mandate.PolicyCheck with ATP's rule
// (CheckHEMEnumerated); authz.RegisterCatalogue registers it.
func (c *Catalogue) CheckPolicies(ps *cedar.PolicySet) error { return CheckHEMEnumerated(ps) }

// CheckHEMEnumerated refuses (ErrWildcardHEM) a policy set with a permit
// policy that could permit HEMAction for a hem_id it does not name: with
// principal, resource and every other context attribute unknown, the
// policy must evaluate to false for hem_id values no policy lists (seed
// decision MCP-D6).
func CheckHEMEnumerated(ps *cedar.PolicySet) error {
	for id, p := range ps.All() {
		if p.Effect() != cedar.Permit {
			continue
		}
		for _, probe := range hemProbes {
			if keep, ok := partialKeep(p, probe); !ok || keep {
				pos := p.Position()
				return fmt.Errorf("%w: policy %s (line %d) permits %s without restricting context.hem_id to listed values; add e.g. `when { [\"HEM-01\", \"HEM-02\"].contains(context.hem_id) }`",
					ErrWildcardHEM, id, pos.Line, HEMAction)
			}
		}
	}
	return nil
}

// partialKeep partially evaluates p for HEMAction with hem_id = probe and
// everything else unknown. ok is false when evaluation panicked.
func partialKeep(p *cedar.Policy, probe string) (keep, ok bool) {
	defer func() {
		if recover() != nil {
			keep, ok = true, false
		}
	}()
	env := eval.Env{
		Entities:  types.EntityMap{},
		Principal: eval.Variable("principal"),
		Action:    HEMAction,
		Resource:  eval.Variable("resource"),
		Context: types.NewRecord(types.RecordMap{
			AttrHEMID:           types.String(probe),
			AttrBookingState:    eval.Variable(AttrBookingState),
			AttrBookingObjectID: eval.Variable(AttrBookingObjectID),
			"required_scopes":   eval.Variable("required_scopes"),
			"tool":              eval.Variable("tool"),
		}),
	}
	_, keep = eval.PartialPolicy(env, (*ast.Policy)(p.AST()))
	return keep, true
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
