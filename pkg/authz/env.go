package authz

import (
	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
)

// CallContext is the Cedar context of a call (schema type CallContext):
// the mesh's attributes tool and required_scopes, and the String
// attributes the registered catalogues declare (SchemaFragment.Context),
// each "" unless Attrs sets it.
type CallContext struct {
	Tool   string
	Scopes []string
	// Attrs are values of catalogue context attributes.
	Attrs map[string]string
}

// Record renders c as a Cedar record.
func (c CallContext) Record() types.Record {
	scopes := make([]types.Value, len(c.Scopes))
	for i, s := range c.Scopes {
		scopes[i] = types.String(s)
	}
	m := types.RecordMap{
		"tool":            types.String(c.Tool),
		"required_scopes": types.NewSet(scopes...),
	}
	for _, f := range fragments() {
		for _, a := range f.Context {
			m[types.String(a)] = types.String("")
		}
	}
	for k, v := range c.Attrs {
		m[types.String(k)] = types.String(v)
	}
	return types.NewRecord(m)
}

// Env is one authorization request in the mesh's model: principal
// Agent::"<Agent>", the action, resource Resource (whose parent is
// Project::"<Project>") when it is set, else Project::"<Project>".
type Env struct {
	Agent string
	// Operator, when set, makes the principal Operator::"<Operator>"
	// instead of the agent.
	Operator string
	Project  string
	Action   types.EntityUID
	// Resource is a catalogue's resource entity; zero: the project.
	Resource types.EntityUID
	Context  CallContext
}

// EnvFor returns the Env of a call whose resource a catalogue resolved
// (res nil: the project).
func EnvFor(agent, project string, action types.EntityUID, tool string, scopes []string, res *Resource) Env {
	e := Env{Agent: agent, Project: project, Action: action, Context: CallContext{Tool: tool, Scopes: scopes}}
	if res != nil {
		e.Resource, e.Context.Attrs = res.UID, res.Context
	}
	return e
}

// ResourceUID returns the request's resource.
func (e Env) ResourceUID() types.EntityUID {
	if e.Resource != (types.EntityUID{}) {
		return e.Resource
	}
	return ProjectUID(e.Project)
}

// Entities returns the entities the request needs (the resource and its
// project).
func (e Env) Entities() types.EntityMap {
	em := types.EntityMap{}
	if e.Resource != (types.EntityUID{}) {
		em[e.Resource] = types.Entity{UID: e.Resource, Parents: types.NewEntityUIDSet(ProjectUID(e.Project))}
	}
	return em
}

// Authorize evaluates ps for e.
func (e Env) Authorize(ps *cedar.PolicySet) (bool, cedar.Diagnostic) {
	principal := AgentUID(e.Agent)
	if e.Operator != "" {
		principal = OperatorUID(e.Operator)
	}
	dec, diag := cedar.Authorize(ps, e.Entities(), cedar.Request{
		Principal: principal, Action: e.Action, Resource: e.ResourceUID(), Context: e.Context.Record(),
	})
	return dec == cedar.Allow, diag
}
