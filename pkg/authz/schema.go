package authz

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	"github.com/cedar-policy/cedar-go/x/exp/ast"
	"github.com/cedar-policy/cedar-go/x/exp/schema"
	"github.com/cedar-policy/cedar-go/x/exp/schema/validate"

	"github.com/utpmesh/utpmesh/pkg/mandate"
)

// SchemaText is the Cedar schema of the mesh's entity types and request
// context. Every action has the same signature; ActionsSchema adds one
// declaration per action. The context attributes are always present (an
// empty string means "none"), so policies need no `has` guards.
const SchemaText = `entity Project;
entity Booking in [Project];
entity Agent;
entity Tool;
type CallContext = {
  tool: String,
  required_scopes: Set<String>,
  booking_object_id: String,
  booking_state: String,
  hem_id: String,
};
`

// ATPActions are the Cedar actions of the ATP catalogue (seed, section 4.4);
// the schema always declares them.
var ATPActions = []string{
	`ATPAction::"get_context_package"`, `ATPAction::"notify_traveller"`,
	`ATPAction::"update_pre_arrangement"`, `ATPAction::"collect_pre_arrangement_data"`,
	`ATPAction::"invoke_hem"`, `ATPAction::"record_safety_check"`,
	`ATPAction::"search_activities"`, `ATPAction::"get_booking_status"`,
}

// schemaActionID maps an action UID to the id it is declared under in the
// validation schema. Cedar schemas only declare actions of type Action (or
// NS::Action), while the mesh keeps the seed's names (ATPAction::"x"), so
// for validation an action T::"id" is declared as Action::"T::id" and
// policies are rewritten the same way before they are checked.
func schemaActionID(uid types.EntityUID) string {
	return string(uid.Type) + "::" + string(uid.ID)
}

// ActionsSchema returns SchemaText with one action declaration per action.
func ActionsSchema(actions []types.EntityUID) string {
	var b strings.Builder
	b.WriteString(SchemaText)
	for _, a := range actions {
		fmt.Fprintf(&b, "action %q appliesTo { principal: [Agent], resource: [Project, Booking], context: CallContext };\n", schemaActionID(a))
	}
	return b.String()
}

// Validate checks a parsed policy set against the mesh schema (strict
// mode): entity types, context attribute names and types, and operator
// types. name prefixes the messages; each names the policy and its line.
// Actions must be constrained in the policy scope (action == T::"id" or
// action in [...]); an action entity in a condition is reported as an
// unknown entity type.
func Validate(name string, ps *cedar.PolicySet) error {
	known := map[types.EntityUID]bool{}
	for _, s := range ATPActions {
		uid, _ := ParseAction(s)
		known[uid] = true
	}
	for _, p := range ps.All() {
		for _, uid := range scopeActions((*ast.Policy)(p.AST()).Action) {
			known[uid] = true
		}
	}
	actions := make([]types.EntityUID, 0, len(known))
	for a := range known {
		actions = append(actions, a)
	}
	sort.Slice(actions, func(i, j int) bool { return actions[i].String() < actions[j].String() })
	var s schema.Schema
	if err := s.UnmarshalCedar([]byte(ActionsSchema(actions))); err != nil {
		return fmt.Errorf("authz: schema: %w", err)
	}
	rs, err := s.Resolve()
	if err != nil {
		return fmt.Errorf("authz: schema: %w", err)
	}
	v := validate.New(rs, validate.WithStrict())
	type item struct {
		id   cedar.PolicyID
		p    *ast.Policy
		line int
	}
	var items []item
	for id, p := range ps.All() {
		items = append(items, item{id, (*ast.Policy)(p.AST()), p.Position().Line})
	}
	sort.Slice(items, func(i, j int) bool { return items[i].line < items[j].line })
	var errs []error
	for _, it := range items {
		if err := validateOne(v, string(it.id), it.p); err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: policy %s: %s", name, it.line, it.id, tidy(string(it.id), err)))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidPolicy, errors.Join(errs...))
	}
	return nil
}

func validateOne(v *validate.Validator, id string, p *ast.Policy) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cannot validate: %v", r)
		}
	}()
	q := *p
	q.Action = rewriteActionScope(p.Action)
	return v.Policy(id, &q)
}

func scopeActions(s ast.IsActionScopeNode) []types.EntityUID {
	switch n := s.(type) {
	case ast.ScopeTypeEq:
		return []types.EntityUID{n.Entity}
	case ast.ScopeTypeIn:
		return []types.EntityUID{n.Entity}
	case ast.ScopeTypeInSet:
		return slices.Clone(n.Entities)
	}
	return nil
}

func toSchemaAction(uid types.EntityUID) types.EntityUID {
	return types.NewEntityUID("Action", types.String(schemaActionID(uid)))
}

func rewriteActionScope(s ast.IsActionScopeNode) ast.IsActionScopeNode {
	switch n := s.(type) {
	case ast.ScopeTypeEq:
		return ast.ScopeTypeEq{Entity: toSchemaAction(n.Entity)}
	case ast.ScopeTypeIn:
		return ast.ScopeTypeIn{Entity: toSchemaAction(n.Entity)}
	case ast.ScopeTypeInSet:
		out := make([]types.EntityUID, len(n.Entities))
		for i, e := range n.Entities {
			out[i] = toSchemaAction(e)
		}
		return ast.ScopeTypeInSet{Entities: out}
	}
	return s
}

// ParseAndValidate parses Cedar policy text (syntax errors name the line
// and column) and validates it against the schema.
func ParseAndValidate(name, text string) (*cedar.PolicySet, error) {
	ps, err := mandate.ParsePolicies(name, text)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
	}
	if err := Validate(name, ps); err != nil {
		return nil, err
	}
	return ps, nil
}

var actionInMsg = regexp.MustCompile(` (for|of) Action::"[^"]*"`)

// tidy collapses the validator's messages: every action has the same
// signature, so one message per distinct problem is enough.
func tidy(id string, err error) string {
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "for policy `"+id+"`, ")
		line = actionInMsg.ReplaceAllString(line, "")
		if line != "" && !seen[line] {
			seen[line] = true
			out = append(out, line)
		}
	}
	return strings.Join(out, "; ")
}
