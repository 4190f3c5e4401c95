package authz

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"

	"github.com/utpmesh/utpmesh/internal/suggest"
	"github.com/utpmesh/utpmesh/pkg/registry"
)

// ActionSource lists the Cedar actions a project's policies may name.
type ActionSource interface {
	// Actions returns the actions of the project's tools.
	Actions(ctx context.Context, project string) ([]types.EntityUID, error)
}

// RegistryActions is the ActionSource of a registry: the action of every
// tool registered in the project (ActionOf). The registered catalogues'
// actions are always known besides (ValidateFor adds them).
type RegistryActions struct {
	Registry registry.Registry
}

// Actions implements ActionSource.
func (r RegistryActions) Actions(ctx context.Context, project string) ([]types.EntityUID, error) {
	entries, err := r.Registry.List(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("authz: list the tools of %s to validate its policies: %w", project, err)
	}
	out := make([]types.EntityUID, 0, len(entries))
	for _, e := range entries {
		if a, err := ActionOf(e); err == nil {
			out = append(out, a)
		}
	}
	return out, nil
}

// checkNames walks one policy (its Cedar JSON form) for names the schema
// does not know, and says for each the nearest valid one. It checks:
//   - entity types in the principal and resource scope (==, in, is) and in
//     entity literals and `is` tests of conditions: Project, Agent, Tool
//     or a catalogue's entity type;
//   - actions of the action scope, when actions is not nil: one of them
//     (the project's tools' actions and the catalogues' actions);
//   - attribute accesses and `has` tests on context (CallContext's
//     attributes, the catalogues' included) and on principal, resource and
//     action (entities of the mesh have no attributes).
//
// It does not check types, operators, extension calls or attributes of
// records other than context; the cedar-go validator run after it does
// (strict mode). An entity literal in a condition whose type ends in
// "Action" is refused as an action outside the scope.
func checkNames(p *cedar.Policy, frags []SchemaFragment, actions []types.EntityUID) []string {
	raw, err := p.MarshalJSON()
	if err != nil {
		return nil
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil
	}
	c := &nameChecker{seen: map[string]bool{}, entityTypes: entityTypeNames(frags), contextAttrs: contextAttrNames(frags)}
	if actions != nil {
		c.actions = map[string]bool{}
		for _, a := range actions {
			c.actions[a.String()] = true
			c.actionList = append(c.actionList, a.String())
		}
		sort.Strings(c.actionList)
	}
	for _, scope := range []string{"principal", "resource"} {
		if m, ok := doc[scope].(map[string]any); ok {
			c.scope(scope, m)
		}
	}
	if m, ok := doc["action"].(map[string]any); ok {
		c.actionScope(m)
	}
	if conds, ok := doc["conditions"].([]any); ok {
		for _, cond := range conds {
			if m, ok := cond.(map[string]any); ok {
				c.expr(m["body"])
			}
		}
	}
	return c.errs
}

type nameChecker struct {
	entityTypes  []string
	contextAttrs []string
	actions      map[string]bool
	actionList   []string
	errs         []string
	seen         map[string]bool
}

func (c *nameChecker) add(msg string) {
	if !c.seen[msg] {
		c.seen[msg] = true
		c.errs = append(c.errs, msg)
	}
}

func (c *nameChecker) entityType(t, where string) {
	for _, k := range c.entityTypes {
		if t == k {
			return
		}
	}
	msg := fmt.Sprintf("unknown entity type %s %s", t, where)
	if s := nearest(t, c.entityTypes); s != "" {
		msg += fmt.Sprintf("; did you mean %s?", s)
	} else {
		msg += "; the entity types are " + strings.Join(c.entityTypes, ", ")
	}
	c.add(msg)
}

func entityRef(v any) (typ, id string, ok bool) {
	m, _ := v.(map[string]any)
	if m == nil {
		return "", "", false
	}
	typ, ok1 := m["type"].(string)
	id, ok2 := m["id"].(string)
	return typ, id, ok1 && ok2
}

// scope checks a principal or resource scope: {"op", "entity"|"entities"|
// "entity_type", "in": {"entity"}}.
func (c *nameChecker) scope(which string, m map[string]any) {
	where := "in the " + which + " scope"
	if t, _, ok := entityRef(m["entity"]); ok {
		c.entityType(t, where)
	}
	if list, ok := m["entities"].([]any); ok {
		for _, e := range list {
			if t, _, ok := entityRef(e); ok {
				c.entityType(t, where)
			}
		}
	}
	if t, ok := m["entity_type"].(string); ok {
		c.entityType(t, where)
	}
	if in, ok := m["in"].(map[string]any); ok {
		if t, _, ok := entityRef(in["entity"]); ok {
			c.entityType(t, where)
		}
	}
}

func (c *nameChecker) actionScope(m map[string]any) {
	if c.actions == nil {
		return
	}
	var refs []any
	if e, ok := m["entity"]; ok {
		refs = append(refs, e)
	}
	if list, ok := m["entities"].([]any); ok {
		refs = append(refs, list...)
	}
	for _, r := range refs {
		t, id, ok := entityRef(r)
		if !ok {
			continue
		}
		a := types.NewEntityUID(types.EntityType(t), types.String(id)).String()
		if c.actions[a] {
			continue
		}
		msg := "unknown action " + a
		if s := nearestAction(a, c.actionList); s != "" {
			msg += fmt.Sprintf("; did you mean %s?", s)
		} else {
			msg += "; no tool of the project has it (utpmesh tools ls lists the tools; a tool's action is its cedar_action, else Action::\"<tool name>\")"
		}
		c.add(msg)
	}
}

// nearestAction is nearest for action strings; a typo may be anywhere, so
// the threshold follows the id's length, not the whole string's.
func nearestAction(a string, list []string) string {
	i := strings.LastIndex(a, `::"`)
	if i < 0 {
		return ""
	}
	return suggest.Nearest(a, list, suggest.Limit(len(a)-i-4, 3), true)
}

// expr walks a condition body in Cedar JSON form.
func (c *nameChecker) expr(v any) {
	switch n := v.(type) {
	case []any:
		for _, x := range n {
			c.expr(x)
		}
	case map[string]any:
		keys := make([]string, 0, len(n))
		for k := range n {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			body := n[k]
			switch k {
			case ".", "has":
				if m, ok := body.(map[string]any); ok {
					c.attr(m, k == "has")
				}
			case "__entity":
				if t, id, ok := entityRef(body); ok {
					if strings.HasSuffix(t, DefaultActionType) {
						c.add(fmt.Sprintf("action %s in a condition: constrain actions in the policy scope instead (action == %s or action in [...])",
							types.NewEntityUID(types.EntityType(t), types.String(id)), types.NewEntityUID(types.EntityType(t), types.String(id))))
						continue
					}
					c.entityType(t, "in a condition")
				}
				continue
			case "is":
				if m, ok := body.(map[string]any); ok {
					if t, ok := m["entity_type"].(string); ok {
						c.entityType(t, "in an `is` test")
					}
				}
			}
			c.expr(body)
		}
	}
}

// attr checks X.attr and X has attr where X is a variable.
func (c *nameChecker) attr(m map[string]any, has bool) {
	left, _ := m["left"].(map[string]any)
	name, _ := m["attr"].(string)
	if left == nil {
		return
	}
	v, _ := left["Var"].(string)
	access := v + "." + name
	if has {
		access = name + " in `" + v + " has " + name + "`"
	}
	switch v {
	case "context":
		for _, a := range c.contextAttrs {
			if a == name {
				return
			}
		}
		msg := fmt.Sprintf("unknown attribute %s", access)
		if s := nearest(name, c.contextAttrs); s != "" {
			msg += fmt.Sprintf("; did you mean context.%s?", s)
		} else {
			msg += "; context has " + strings.Join(c.contextAttrs, ", ")
		}
		c.add(msg)
	case "principal", "resource", "action":
		c.add(fmt.Sprintf("unknown attribute %s: the mesh's %s entities have no attributes; the call's attributes are context.%s", access, v, strings.Join(c.contextAttrs, ", context.")))
	}
}

// MaxPolicyBytes bounds one project's stored policy text, in every policy
// store.
const MaxPolicyBytes = 256 << 10

// ValidateStored is what a policy store checks before it stores text as a
// project's policy set: the size limit, the schema, and, with src, the
// actions of the project's tools (nil src: any action in a policy's scope
// is accepted).
func ValidateStored(ctx context.Context, src ActionSource, project, text string) error {
	if len(text) > MaxPolicyBytes {
		return fmt.Errorf("%w: policies are %d bytes, the limit is %d", ErrInvalidPolicy, len(text), MaxPolicyBytes)
	}
	var actions []types.EntityUID
	if src != nil {
		var err error
		if actions, err = src.Actions(ctx, project); err != nil {
			return err
		}
		if actions == nil {
			actions = []types.EntityUID{}
		}
	}
	_, err := ParseAndValidateFor("policies", text, actions)
	return err
}
