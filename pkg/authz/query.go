package authz

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cedar-policy/cedar-go"
	cast "github.com/cedar-policy/cedar-go/ast"
	"github.com/cedar-policy/cedar-go/types"
	"github.com/cedar-policy/cedar-go/x/exp/ast"
	"github.com/cedar-policy/cedar-go/x/exp/eval"

	"github.com/utpmesh/utpmesh/pkg/mandate"
)

// ToolAction is one tool the Windley query considers.
type ToolAction struct {
	ToolName string          `json:"tool_name"`
	Action   types.EntityUID `json:"-"`
	Scopes   []string        `json:"scopes,omitempty"`
}

// QueryRequest is a Windley Loop query: which tools may this agent call in
// the current state of its mandate's bound resource?
type QueryRequest struct {
	Project string
	AgentID string
	// Mandate is the verified mandate; nil only for a project that
	// requires none.
	Mandate *mandate.Mandate
	// ProjectPolicies is the project's policy set.
	ProjectPolicies *cedar.PolicySet
	// Tools are the project's tools (registry), with their actions.
	Tools []ToolAction
	// State is the current state of the mandate's bound resource; nil
	// when unknown (then the conditions on the catalogues' state
	// attributes stay in the residual).
	State *string
	// Resources resolve the bound resource (GateConfig.Resources);
	// optional: without, the registered catalogues are asked.
	Resources []ResourceResolver
}

// PermittedTool is one tool of the residual set.
type PermittedTool struct {
	ToolName string `json:"tool_name"`
	Action   string `json:"action"`
	// Conditional: the call is permitted only when Conditions hold (or
	// only for Enumerated, the permitted values of the enumerated
	// attribute; wire: hem_ids).
	Conditional bool     `json:"conditional"`
	Enumerated  []string `json:"hem_ids,omitempty"`
	// Conditions are the residual Cedar policies that still decide.
	Conditions []string `json:"conditions,omitempty"`
}

// Residual is the answer of a Windley query.
type Residual struct {
	TemplateVersion string     `json:"template_version"`
	ProjectID       string     `json:"project_id"`
	AgentID         string     `json:"agent_id"`
	MandateJTI      string     `json:"mandate_jti,omitempty"`
	ExpiresAt       *time.Time `json:"expires_at,omitempty"`
	// ResourceID is the mandate's bound resource (wire:
	// booking_object_id).
	ResourceID *string `json:"booking_object_id"`
	// State is the resource's state as the query was told it (wire:
	// booking_state).
	State        *string         `json:"booking_state"`
	Permitted    []PermittedTool `json:"permitted"`
	NotPermitted []string        `json:"not_permitted"`
	// Enumerated are the permitted values of the catalogues' first
	// enumerated context attribute (SchemaFragment.Enumerated; wire:
	// hem_ids).
	Enumerated []string `json:"hem_ids"`
	// ContextBlock is the rendered Windley context block (the registered
	// ContextRenderer's, else a plain list).
	ContextBlock string `json:"context_block"`
}

// Allows reports whether tool is in the residual set for value (the value
// of the enumerated attribute; ignored unless the tool is permitted only
// for listed values).
func (r *Residual) Allows(tool, value string) bool {
	for _, p := range r.Permitted {
		if p.ToolName != tool {
			continue
		}
		if len(p.Enumerated) > 0 {
			return slices.Contains(p.Enumerated, value)
		}
		return !p.Conditional
	}
	return false
}

type status int

const (
	stDeny status = iota
	stAllow
	stConditional
)

// Query runs the Windley Loop query: Cedar partial evaluation of the
// project's and the mandate's policies, for every tool, with the
// catalogues' enumerated context attributes (and their state attributes
// when the state is unknown) left as unknowns; the resource is the one
// the mandate is bound to, as the catalogues resolve it. A tool is
// permitted when both sets permit it; conditional when residual
// conditions remain; for a conditional tool whose only unknown is the
// enumerated attribute, the values that are permitted are enumerated from
// the policies' string literals and confirmed by full authorization.
func Query(ctx context.Context, q QueryRequest) (*Residual, error) {
	if q.ProjectPolicies == nil {
		return nil, fmt.Errorf("%w: no project policies", ErrInvalidRequest)
	}
	agent := q.AgentID
	r := &Residual{ProjectID: q.Project, State: q.State,
		Permitted: []PermittedTool{}, NotPermitted: []string{}, Enumerated: []string{}}
	var bound *string
	sets := []*cedar.PolicySet{q.ProjectPolicies}
	if m := q.Mandate; m != nil {
		agent = m.Claims.Subject
		r.MandateJTI = m.Claims.JTI
		exp := m.Expires()
		r.ExpiresAt = &exp
		if m.Claims.Resource != nil {
			b := *m.Claims.Resource
			bound, r.ResourceID = &b, &b
		}
		sets = append(sets, m.Policies)
	}
	if agent == "" {
		return nil, fmt.Errorf("%w: agent_id is required without a mandate", ErrInvalidRequest)
	}
	r.AgentID = agent
	frags := fragments()
	unknown, enumAttr := queryUnknowns(frags, q.State == nil)
	state := ""
	if q.State != nil {
		state = *q.State
	}
	rs := resolvers(q.Resources)
	candidates := stringLiterals(sets...)
	hemSet := map[string]bool{}
	tools := slices.Clone(q.Tools)
	sort.Slice(tools, func(i, j int) bool { return tools[i].ToolName < tools[j].ToolName })
	for _, t := range tools {
		res, err := resolve(ctx, rs, ResourceRequest{Project: q.Project, Tool: t.ToolName, Action: t.Action, Bound: bound, MandateJTI: r.MandateJTI, State: &state})
		if err != nil {
			return nil, fmt.Errorf("authz: resource of %s: %w", t.ToolName, err)
		}
		env := EnvFor(agent, q.Project, t.Action, t.ToolName, t.Scopes, res)
		st, conds := stAllow, []string(nil)
		for _, ps := range sets {
			s, c, err := classify(ps, env, unknown)
			if err != nil {
				return nil, err
			}
			switch {
			case s == stDeny:
				st = stDeny
			case s == stConditional && st != stDeny:
				st = stConditional
			}
			conds = append(conds, c...)
		}
		pt := PermittedTool{ToolName: t.ToolName, Action: t.Action.String()}
		switch st {
		case stDeny:
			r.NotPermitted = append(r.NotPermitted, t.ToolName)
			continue
		case stAllow:
			r.Permitted = append(r.Permitted, pt)
			continue
		}
		pt.Conditional, pt.Conditions = true, conds
		if q.State != nil && enumAttr != "" {
			// Only the enumerated attribute is unknown: enumerate it.
			for _, c := range candidates {
				env.Context.Attrs = withAttr(env.Context.Attrs, enumAttr, c)
				if allAllow(env, sets) {
					pt.Enumerated = append(pt.Enumerated, c)
					hemSet[c] = true
				}
			}
			if len(pt.Enumerated) == 0 {
				env.Context.Attrs = withAttr(env.Context.Attrs, enumAttr, wildcardProbe)
				if !allAllow(env, sets) {
					r.NotPermitted = append(r.NotPermitted, t.ToolName)
					continue
				}
			}
		}
		r.Permitted = append(r.Permitted, pt)
	}
	for h := range hemSet {
		r.Enumerated = append(r.Enumerated, h)
	}
	sort.Strings(r.Enumerated)
	r.TemplateVersion, r.ContextBlock = renderContext(r)
	return r, nil
}

const wildcardProbe = "\x00utpmesh-unlisted-value"

// queryUnknowns returns the context attributes a query leaves unknown (the
// fragments' enumerated attributes, and their state attributes when
// stateUnknown) and the first enumerated attribute.
func queryUnknowns(frags []SchemaFragment, stateUnknown bool) (unknown []string, enum string) {
	for _, f := range frags {
		unknown = append(unknown, f.Enumerated...)
		if enum == "" && len(f.Enumerated) > 0 {
			enum = f.Enumerated[0]
		}
		if stateUnknown && f.State != "" {
			unknown = append(unknown, f.State)
		}
	}
	return unknown, enum
}

// withAttr returns a copy of attrs with k set to v.
func withAttr(attrs map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(attrs)+1)
	for a, x := range attrs {
		out[a] = x
	}
	out[k] = v
	return out
}

func allAllow(env Env, sets []*cedar.PolicySet) bool {
	for _, ps := range sets {
		if ok, _ := env.Authorize(ps); !ok {
			return false
		}
	}
	return true
}

// classify partially evaluates ps for env with the unknown context
// attributes left as variables.
func classify(ps *cedar.PolicySet, env Env, unknown []string) (st status, conds []string, err error) {
	rec := env.Context.Record()
	m := types.RecordMap{}
	for k, v := range rec.All() {
		m[k] = v
	}
	for _, a := range unknown {
		m[types.String(a)] = eval.Variable(types.String(a))
	}
	ev := eval.Env{
		Entities: env.Entities(), Principal: AgentUID(env.Agent), Action: env.Action,
		Resource: env.ResourceUID(), Context: types.NewRecord(m),
	}
	var permitTrivial, permitResidual, forbidTrivial, forbidResidual bool
	type item struct {
		line int
		txt  string
	}
	var items []item
	for id, p := range ps.All() {
		pp, keep, perr := partial(ev, (*ast.Policy)(p.AST()))
		if perr != nil {
			return stDeny, nil, fmt.Errorf("authz: partial evaluation of policy %s: %w", id, perr)
		}
		if !keep {
			continue
		}
		trivial := isTrivial(pp)
		forbid := pp.Effect == ast.EffectForbid
		switch {
		case forbid && trivial:
			forbidTrivial = true
		case forbid:
			forbidResidual = true
		case trivial:
			permitTrivial = true
		default:
			permitResidual = true
		}
		if !trivial {
			items = append(items, item{p.Position().Line, fmt.Sprintf("%s: %s", id, oneLine(pp))})
		}
	}
	sort.Slice(items, func(i, j int) bool { return items[i].line < items[j].line })
	for _, it := range items {
		conds = append(conds, it.txt)
	}
	switch {
	case forbidTrivial, !permitTrivial && !permitResidual:
		return stDeny, nil, nil
	case permitTrivial && !forbidResidual:
		return stAllow, nil, nil
	}
	return stConditional, conds, nil
}

func partial(env eval.Env, p *ast.Policy) (pp *ast.Policy, keep bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	pp, keep = eval.PartialPolicy(env, p)
	return pp, keep, nil
}

// isTrivial reports whether every condition of a partially evaluated
// policy is the literal it needs (when true / unless false).
func isTrivial(p *ast.Policy) bool {
	for _, c := range p.Conditions {
		v, ok := c.Body.(ast.NodeValue)
		if !ok {
			return false
		}
		b, ok := v.Value.(types.Boolean)
		if !ok || bool(b) != bool(c.Condition) {
			return false
		}
	}
	return true
}

func oneLine(p *ast.Policy) string {
	q := *p
	q.Annotations = nil
	return strings.Join(strings.Fields(string(cedar.NewPolicyFromAST((*cast.Policy)(&q)).MarshalCedar())), " ")
}

// stringLiterals returns the distinct string literals of the policies'
// conditions, sorted: the only values of an enumerated attribute a
// policy can permit.
func stringLiterals(sets ...*cedar.PolicySet) []string {
	seen := map[string]bool{}
	var add func(v types.Value)
	add = func(v types.Value) {
		switch x := v.(type) {
		case types.String:
			seen[string(x)] = true
		case types.Set:
			for e := range x.All() {
				add(e)
			}
		}
	}
	for _, ps := range sets {
		for _, p := range ps.All() {
			for _, c := range (*ast.Policy)(p.AST()).Conditions {
				ast.Inspect(ast.NewNode(c.Body), func(n ast.IsNode) bool {
					if v, ok := n.(ast.NodeValue); ok {
						add(v.Value)
					}
					return true
				})
			}
		}
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
