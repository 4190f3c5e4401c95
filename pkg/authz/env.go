package authz

import (
	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
)

// CallContext is the Cedar context of a call (schema type CallContext).
// Empty strings mean "none".
type CallContext struct {
	Tool            string
	Scopes          []string
	BookingObjectID string
	BookingState    string
	HEMID           string
}

// Record renders c as a Cedar record.
func (c CallContext) Record() types.Record {
	scopes := make([]types.Value, len(c.Scopes))
	for i, s := range c.Scopes {
		scopes[i] = types.String(s)
	}
	return types.NewRecord(types.RecordMap{
		"tool":              types.String(c.Tool),
		"required_scopes":   types.NewSet(scopes...),
		"booking_object_id": types.String(c.BookingObjectID),
		"booking_state":     types.String(c.BookingState),
		"hem_id":            types.String(c.HEMID),
	})
}

// Env is one authorization request in the mesh's model: principal
// Agent::"<Agent>", the action, resource Booking::"<Booking>" (whose
// parent is Project::"<Project>") when Booking is set, else
// Project::"<Project>".
type Env struct {
	Agent   string
	Project string
	Action  types.EntityUID
	Booking string
	Context CallContext
}

// Resource returns the request's resource.
func (e Env) Resource() types.EntityUID {
	if e.Booking != "" {
		return BookingUID(e.Booking)
	}
	return ProjectUID(e.Project)
}

// Entities returns the entities the request needs (the booking and its
// project).
func (e Env) Entities() types.EntityMap {
	em := types.EntityMap{}
	if e.Booking != "" {
		b := BookingUID(e.Booking)
		em[b] = types.Entity{UID: b, Parents: types.NewEntityUIDSet(ProjectUID(e.Project))}
	}
	return em
}

// Authorize evaluates ps for e.
func (e Env) Authorize(ps *cedar.PolicySet) (bool, cedar.Diagnostic) {
	dec, diag := cedar.Authorize(ps, e.Entities(), cedar.Request{
		Principal: AgentUID(e.Agent), Action: e.Action, Resource: e.Resource(), Context: e.Context.Record(),
	})
	return dec == cedar.Allow, diag
}
