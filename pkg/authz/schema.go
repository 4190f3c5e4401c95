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

// SchemaText is the Cedar schema of the mesh's own entity types and
// request context. SchemaFor adds the registered catalogues' fragments
// (RegisterCatalogue); every action has the same signature, and
// ActionsSchema adds one declaration per action. The context attributes
// are always present (an empty string means "none"), so policies need no
// `has` guards.
const SchemaText = `entity Project;
entity Agent;
entity Operator;
entity Tool;
type CallContext = {
  tool: String,
  required_scopes: Set<String>,
};
`

// SchemaFor returns the schema of the mesh and the fragments: their entity
// types (children of Project) and context attributes.
func SchemaFor(frags []SchemaFragment) string {
	var b strings.Builder
	b.WriteString("entity Project;\n")
	for _, f := range frags {
		for _, e := range f.Entities {
			fmt.Fprintf(&b, "entity %s in [Project];\n", e.Type)
		}
	}
	b.WriteString("entity Agent;\nentity Operator;\nentity Tool;\ntype CallContext = {\n  tool: String,\n  required_scopes: Set<String>,\n")
	for _, a := range contextAttrNames(frags)[2:] {
		fmt.Fprintf(&b, "  %s: String,\n", a)
	}
	b.WriteString("};\n")
	return b.String()
}

// contextAttrNames are the context attributes: the mesh's, then the
// fragments'.
func contextAttrNames(frags []SchemaFragment) []string {
	out := []string{"tool", "required_scopes"}
	for _, f := range frags {
		for _, a := range f.Context {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// entityTypeNames are the entity types a policy may name outside the
// action scope: the mesh's, and the fragments' after Project.
func entityTypeNames(frags []SchemaFragment) []string {
	out := []string{TypeProject}
	for _, f := range frags {
		for _, e := range f.Entities {
			if !slices.Contains(out, e.Type) {
				out = append(out, e.Type)
			}
		}
	}
	return append(out, TypeAgent, TypeOperator, TypeTool)
}

// ActionsSchema returns the schema of the registered catalogues with one
// action declaration per action.
func ActionsSchema(actions []types.EntityUID) string {
	return actionsSchema(fragments(), actions)
}

func actionsSchema(frags []SchemaFragment, actions []types.EntityUID) string {
	var b strings.Builder
	b.WriteString(SchemaFor(frags))
	resources := []string{TypeProject}
	for _, t := range entityTypeNames(frags)[1:] {
		if t != TypeAgent && t != TypeOperator && t != TypeTool {
			resources = append(resources, t)
		}
	}
	for _, a := range actions {
		fmt.Fprintf(&b, "action %q appliesTo { principal: [Agent, Operator], resource: [%s], context: CallContext };\n", schemaActionID(a), strings.Join(resources, ", "))
	}
	return b.String()
}

// schemaActionID maps an action UID to the id it is declared under in the
// validation schema. Cedar schemas only declare actions of type Action (or
// NS::Action), while the mesh keeps the catalogues' names (e.g.
// ATPAction::"x"), so for validation an action T::"id" is declared as
// Action::"T::id" and policies are rewritten the same way before they are
// checked.
func schemaActionID(uid types.EntityUID) string {
	return string(uid.Type) + "::" + string(uid.ID)
}

// Validate checks a parsed policy set against the mesh schema (strict
// mode) without a list of known actions: every action the policies name in
// their scope is accepted. Mandates use it (the project's policy set,
// validated with ValidateFor, must permit their actions too). See
// ValidateFor for what is checked.
func Validate(name string, ps *cedar.PolicySet) error {
	return validateSet(name, ps, fragments(), nil)
}

// ValidateFor checks a parsed policy set against the mesh schema and the
// actions a project's policies may name (its tools' actions; the
// registered catalogues' SchemaFragment.Actions are always added). It reports, each with the policy's line and column
// and the nearest valid name: unknown actions, unknown entity types and
// unknown attributes (checkNames), then runs cedar-go's validator in
// strict mode for types and operators. Actions must be constrained in the
// policy scope (action == T::"id" or action in [...]); an action entity in
// a condition is refused. A nil actions behaves as Validate.
func ValidateFor(name string, ps *cedar.PolicySet, actions []types.EntityUID) error {
	frags := fragments()
	if actions != nil {
		actions = append(slices.Clone(actions), catalogueActions(frags)...)
	}
	return validateSet(name, ps, frags, actions)
}

// catalogueActions are the fragments' always-known actions.
func catalogueActions(frags []SchemaFragment) []types.EntityUID {
	var out []types.EntityUID
	for _, f := range frags {
		for _, s := range f.Actions {
			if uid, err := ParseAction(s); err == nil {
				out = append(out, uid)
			}
		}
	}
	return out
}

func validateSet(name string, ps *cedar.PolicySet, frags []SchemaFragment, strictActions []types.EntityUID) error {
	known := map[types.EntityUID]bool{}
	for _, uid := range catalogueActions(frags) {
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
	if err := s.UnmarshalCedar([]byte(actionsSchema(frags, actions))); err != nil {
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
		if names := checkNames(it.p, frags, checkActions); len(names) > 0 {
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
