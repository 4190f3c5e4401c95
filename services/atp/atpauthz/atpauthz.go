package atpauthz

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cedar-policy/cedar-go/types"

	"github.com/utpmesh/utpmesh/pkg/authz"
)

// Name is the catalogue's name (authz.RegisterCatalogue).
const Name = "atp"

// TypeBooking is the Cedar entity type of a Booking Object; its parent is
// the project, so `resource in Project::"p"` matches it.
const TypeBooking = "Booking"

// Context attributes the catalogue adds to every call's Cedar context.
const (
	AttrBookingObjectID = "booking_object_id"
	AttrBookingState    = "booking_state"
	AttrHEMID           = "hem_id"
)

// ErrorScope is the atp_error_code of an ATP tool call the gate denies.
const ErrorScope = "MCP-403-SCOPE"

// Actions are the Cedar actions of the ATP catalogue (seed, section 4.4);
// every project's policies may name them.
var Actions = []string{
	`ATPAction::"get_context_package"`, `ATPAction::"notify_traveller"`,
	`ATPAction::"update_pre_arrangement"`, `ATPAction::"collect_pre_arrangement_data"`,
	`ATPAction::"invoke_hem"`, `ATPAction::"record_safety_check"`,
	`ATPAction::"search_activities"`, `ATPAction::"get_booking_status"`,
}

// BookingUID is the resource of a call bound to a booking.
func BookingUID(id string) types.EntityUID {
	return types.NewEntityUID(TypeBooking, types.String(id))
}

// States tells the gate a booking's current state (the context attribute
// booking_state). booking.Store and atp.States implement it.
type States interface {
	BookingState(ctx context.Context, project, bookingID string) (string, error)
}

// Catalogue is the ATP catalogue's contribution to authorization: the
// Booking entity, the context attributes booking_object_id, booking_state
// and hem_id, the ATPAction actions, the entity loader, the MCP-403-SCOPE
// denial body and the Windley context block.
type Catalogue struct {
	// States gives booking states; nil: booking_state is "" unless the
	// request says it.
	States States
}

var (
	_ authz.Catalogue       = (*Catalogue)(nil)
	_ authz.DenialDecorator = (*Catalogue)(nil)
	_ authz.ContextRenderer = (*Catalogue)(nil)
)

// New returns the catalogue reading booking states from states (nil: none).
func New(states States) *Catalogue { return &Catalogue{States: states} }

// Register registers the catalogue without a state provider, so every
// project's schema knows ATP's names (the CLI's and tests' validation);
// the mesh assembly registers one with states.
func Register() { authz.RegisterCatalogue(New(nil)) }

// Name implements authz.Catalogue.
func (c *Catalogue) Name() string { return Name }

// Schema implements authz.Catalogue.
func (c *Catalogue) Schema() authz.SchemaFragment {
	return authz.SchemaFragment{
		Entities:   []authz.EntityDecl{{Type: TypeBooking}},
		Context:    []string{AttrBookingObjectID, AttrBookingState, AttrHEMID},
		Actions:    Actions,
		State:      AttrBookingState,
		Enumerated: []string{AttrHEMID},
	}
}

// callArgs are the arguments the catalogue reads.
type callArgs struct {
	BookingObjectID string
	HEMID           string
}

// readArgs reads the top-level booking_object_id and hem_id of a call's
// arguments. Most calls the gate sees are not ATP's: arguments that hold
// neither name, and no escape that could spell one, are not decoded.
func readArgs(raw json.RawMessage) callArgs {
	if bytes.IndexByte(raw, '\\') < 0 && !bytes.Contains(raw, []byte(AttrBookingObjectID)) && !bytes.Contains(raw, []byte(AttrHEMID)) {
		return callArgs{}
	}
	var m map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil {
		return callArgs{}
	}
	var a callArgs
	if v, ok := m[AttrBookingObjectID]; ok {
		_ = json.Unmarshal(v, &a.BookingObjectID)
	}
	if v, ok := m[AttrHEMID]; ok {
		_ = json.Unmarshal(v, &a.HEMID)
	}
	return a
}

// ResolveResource implements authz.ResourceResolver: the booking is the
// call's top-level booking_object_id, or the mandate's binding (which must
// match it); hem_id is the call's top-level hem_id; booking_state is the
// request's, else the booking's current state (States). A call with none
// of them is not ATP's (nil).
func (c *Catalogue) ResolveResource(ctx context.Context, in authz.ResourceRequest) (*authz.Resource, error) {
	args := readArgs(in.Arguments)
	booking := args.BookingObjectID
	if in.Bound != nil {
		bound := *in.Bound
		if booking != "" && booking != bound {
			return nil, fmt.Errorf("%w: the call names booking_object_id %q, mandate %s is bound to %q", authz.ErrBindingMismatch, booking, in.MandateJTI, bound)
		}
		booking = bound
	}
	state := ""
	if in.State != nil {
		state = *in.State
	} else if booking != "" && c.States != nil {
		var err error
		if state, err = c.States.BookingState(ctx, in.Project, booking); err != nil {
			return nil, fmt.Errorf("state of booking %s: %w", booking, err)
		}
	}
	if booking == "" && state == "" && args.HEMID == "" {
		return nil, nil
	}
	return Resource(booking, state, args.HEMID), nil
}

// Resource is the resource of a call on booking (""; none) in state with
// hemID.
func Resource(booking, state, hemID string) *authz.Resource {
	r := &authz.Resource{ID: booking, State: state, Context: map[string]string{
		AttrBookingObjectID: booking, AttrBookingState: state, AttrHEMID: hemID}}
	if booking != "" {
		r.UID = BookingUID(booking)
	}
	return r
}

// DecorateDenial implements authz.DenialDecorator: for actions in the
// ATPAction namespace the detail carries ATP's denial body (issue 13):
// error repeats reason, required_scope is the tool's first required
// scope, mandate_scopes what the mandate grants, atp_error_code
// MCP-403-SCOPE.
func (c *Catalogue) DecorateDenial(d *authz.AuthFailedDetail) {
	if !strings.HasPrefix(d.RequiredAction, "ATPAction::") {
		return
	}
	d.Error, d.ATPErrorCode, d.MandateScopes = d.Reason, ErrorScope, d.Granted
	if d.MandateScopes == nil {
		d.MandateScopes = []string{}
	}
	if len(d.RequiredScopes) > 0 {
		d.RequiredScope = d.RequiredScopes[0]
	}
}
