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
// mode) without a list of known actions: every action the policies name in
// their scope is accepted. Mandates use it (the project's policy set,
// validated with ValidateFor, must permit their actions too). See
// ValidateFor for what is checked.
func Validate(name string, ps *cedar.PolicySet) error {
	return validateSet(name, ps, nil)
}

// ValidateFor checks a parsed policy set against the mesh schema and the
// actions a project's policies may name (its tools' actions; ATPActions
// are always added). It reports, each with the policy's line and column
// and the nearest valid name: unknown actions, unknown entity types and
// unknown attributes (checkNames), then runs cedar-go's validator in
// strict mode for types and operators. Actions must be constrained in the
// policy scope (action == T::"id" or action in [...]); an action entity in
// a condition is refused. A nil actions behaves as Validate.
func ValidateFor(name string, ps *cedar.PolicySet, actions []types.EntityUID) error {
	if actions != nil {
		actions = append(slices.Clone(actions), atpActionUIDs()...)
	}
	return validateSet(name, ps, actions)
}

func atpActionUIDs() []types.EntityUID {
	out := make([]types.EntityUID, 0, len(ATPActions))
	for _, s := range ATPActions {
		uid, _ := ParseAction(s)
		out = append(out, uid)
	}
	return out
}

func validateSet(name string, ps *cedar.PolicySet, strictActions []types.EntityUID) error {
	known := map[types.EntityUID]bool{}
	for _, uid := range atpActionUIDs() {
		known[uid] = true
	}
	for _, uid := range strictActions {
		known[uid] = true
	}
	if strictActions == nil {
		for _, p := range ps.All() {
			for _, uid := range scopeActions((*ast.Policy)(p.AST()).Action) {
				known[uid] = true
			}
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
		id  cedar.PolicyID
		p   *cedar.Policy
		pos cedar.Position
	}
	var items []item
	for id, p := range ps.All() {
		items = append(items, item{id, p, p.Position()})
	}
	sort.Slice(items, func(i, j int) bool { return items[i].pos.Offset < items[j].pos.Offset })
	var checkActions []types.EntityUID
	if strictActions != nil {
		checkActions = actions
	}
	var errs []error
	for _, it := range items {
		where := fmt.Sprintf("%s: line %d, column %d: policy %s", name, it.pos.Line, it.pos.Column, it.id)
		if names := checkNames(it.p, checkActions); len(names) > 0 {
			errs = append(errs, fmt.Errorf("%s: %s", where, strings.Join(names, "; ")))
			continue
		}
		if err := validateOne(v, string(it.id), (*ast.Policy)(it.p.AST())); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s", where, tidy(string(it.id), err)))
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

// ParseAndValidate parses Cedar policy text (syntax errors are explained
// in words with line and column, ExplainParseError) and validates it
// against the schema without a list of known actions (Validate).
func ParseAndValidate(name, text string) (*cedar.PolicySet, error) {
	return ParseAndValidateFor(name, text, nil)
}

// ParseAndValidateFor parses Cedar policy text and validates it with
// ValidateFor against actions (nil: any action, as ParseAndValidate).
func ParseAndValidateFor(name, text string, actions []types.EntityUID) (*cedar.PolicySet, error) {
	if err := syntaxError(text); err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrInvalidPolicy, name, ExplainParseError(text, err))
	}
	ps, err := mandate.ParsePolicies(name, text)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
	}
	if err := ValidateFor(name, ps, actions); err != nil {
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

// syntaxError is cedar-go's parse error of text, if any.
func syntaxError(text string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cannot parse: %v", r)
		}
	}()
	_, err = cedar.NewPolicyListFromBytes("policies", []byte(text))
	return err
}
