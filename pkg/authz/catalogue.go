package authz

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"

	"github.com/cedar-policy/cedar-go/types"

	"github.com/utpmesh/utpmesh/pkg/mandate"
)

// ErrBindingMismatch: a call names a resource other than the one its
// mandate is bound to. A ResourceResolver returns an error wrapping it;
// the gate denies the call with ReasonResourceMismatch and the error's
// message.
var ErrBindingMismatch = errors.New("authz: the call's resource is not the mandate's")

// EntityDecl declares one entity type a catalogue adds to the schema.
// Every declared type is a resource of every action, and has Project
// among its parents.
type EntityDecl struct {
	// Type is the Cedar entity type, e.g. Booking.
	Type string
}

// SchemaFragment is what a catalogue adds to the mesh's Cedar schema.
type SchemaFragment struct {
	// Entities are the catalogue's entity types.
	Entities []EntityDecl
	// Context are the String attributes the catalogue adds to
	// CallContext. Every call's context has them ("" when the call does
	// not set them), so policies need no `has` guards.
	Context []string
	// Actions are the Cedar actions (Namespace::"id") a project's policies
	// may always name, whether or not a tool of the project has them.
	Actions []string
	// State is the context attribute that holds the resource's state,
	// left unknown by a Windley query that is not told it ("": none).
	State string
	// Enumerated are context attributes a Windley query leaves unknown and
	// whose permitted values it enumerates from the policies' string
	// literals.
	Enumerated []string
}

// ResourceRequest is what a ResourceResolver is asked about one call.
type ResourceRequest struct {
	Project string
	Tool    string
	Action  types.EntityUID
	// Arguments are the call's arguments (nil for a Windley query).
	Arguments json.RawMessage
	// Bound is the resource id the call's mandate is bound to (claim
	// booking_object_id), nil when unbound.
	Bound *string
	// MandateJTI names the mandate (for messages).
	MandateJTI string
	// State, when set, is the resource's state to use instead of the
	// catalogue's own (policy tests, Windley queries).
	State *string
}

// Resource is a call's resource as a catalogue resolves it.
type Resource struct {
	// UID is the resource entity; the zero UID means Project::"<project>".
	// Its parent is the project, so `resource in Project::"p"` matches it.
	UID types.EntityUID
	// ID is the bound resource id reported in decisions and audit records
	// (booking_object_id).
	ID string
	// State is the resource's state, reported in decisions
	// (booking_state).
	State string
	// Context are the values of the catalogue's context attributes for
	// this call.
	Context map[string]string
}

// ResourceResolver is a catalogue's entity loader: given a call, its
// resource entity and the catalogue's context attributes.
type ResourceResolver interface {
	// ResolveResource returns the call's resource, or nil when the call
	// concerns none of the catalogue's entities. An error wrapping
	// ErrBindingMismatch denies the call; any other error means the gate
	// cannot decide.
	ResolveResource(ctx context.Context, in ResourceRequest) (*Resource, error)
}

// Catalogue is a catalogue's contribution to the authorization model.
type Catalogue interface {
	// Name names the catalogue; registering a name again replaces it.
	Name() string
	// Schema is the catalogue's schema fragment.
	Schema() SchemaFragment
	ResourceResolver
}

// DenialDecorator is implemented by a catalogue that adds its own fields
// to the auth_failed detail of a call it owns.
type DenialDecorator interface {
	// DecorateDenial completes d (RequiredAction names the action).
	DecorateDenial(d *AuthFailedDetail)
}

// ContextRenderer is implemented by a catalogue that renders the Windley
// context block of a residual (Residual.ContextBlock); the first
// registered one renders it.
type ContextRenderer interface {
	// TemplateVersion versions the block (Residual.TemplateVersion).
	TemplateVersion() string
	// RenderContext renders the block.
	RenderContext(r *Residual) string
}

var (
	catMu      sync.RWMutex
	catalogues []Catalogue
)

// RegisterCatalogue adds c's schema fragment to every project's schema
// and makes c the resolver of gates configured without one; a catalogue
// that implements mandate.PolicyCheck has its rule on mandates registered
// too (mandate.RegisterPolicyCheck). The mesh assembly registers the
// catalogues it serves at start; registering a name again replaces the
// earlier one.
func RegisterCatalogue(c Catalogue) {
	catMu.Lock()
	defer catMu.Unlock()
	catalogues = slices.DeleteFunc(catalogues, func(x Catalogue) bool { return x.Name() == c.Name() })
	catalogues = append(catalogues, c)
	if pc, ok := c.(mandate.PolicyCheck); ok {
		mandate.RegisterPolicyCheck(c.Name(), pc)
	} else {
		mandate.UnregisterPolicyCheck(c.Name())
	}
}

// UnregisterCatalogue removes the catalogue of a name (tests).
func UnregisterCatalogue(name string) {
	catMu.Lock()
	defer catMu.Unlock()
	catalogues = slices.DeleteFunc(catalogues, func(x Catalogue) bool { return x.Name() == name })
	mandate.UnregisterPolicyCheck(name)
}

// Catalogues returns the registered catalogues, in registration order.
func Catalogues() []Catalogue {
	catMu.RLock()
	defer catMu.RUnlock()
	return slices.Clone(catalogues)
}

// fragments returns the registered schema fragments.
func fragments() []SchemaFragment {
	cs := Catalogues()
	out := make([]SchemaFragment, len(cs))
	for i, c := range cs {
		out[i] = c.Schema()
	}
	return out
}

// resolvers is the resolvers a gate asks: its own, else the registered
// catalogues.
func resolvers(own []ResourceResolver) []ResourceResolver {
	if len(own) > 0 {
		return own
	}
	cs := Catalogues()
	out := make([]ResourceResolver, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out
}

// resolve asks rs in order; the first resource wins.
func resolve(ctx context.Context, rs []ResourceResolver, in ResourceRequest) (*Resource, error) {
	for _, r := range rs {
		res, err := r.ResolveResource(ctx, in)
		if err != nil || res != nil {
			return res, err
		}
	}
	return nil, nil
}
