package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// Operators' tool names.
const (
	ToolBookingCreate     = "atp_booking_create"
	ToolBookingGet        = "atp_booking_get"
	ToolBookingTransition = "atp_booking_transition"
	ToolBookingEvents     = "atp_booking_events"
)

func (s *Service) adminTools() []spec {
	return []spec{
		{name: ToolBookingCreate, action: `ATPAdminAction::"booking_create"`, scope: ScopeBookingAdmin, risk: registry.RiskMedium,
			desc: "Operators: create a Booking Object (in INQUIRY) from its itinerary, participants, seller contacts, meeting points, pre-arrangement fields, payment and flags; advance_to walks the legal path to PENDING_CONFIRMATION or CONFIRMED, logging each step.",
			params: `{"type":"object","required":["booking"],"additionalProperties":false,"properties":{
"booking":{"type":"object"},"advance_to":{"enum":["PENDING_CONFIRMATION","CONFIRMED","PRE_JOURNEY"]}}}`,
			writes: true, run: s.bookingCreate},
		{name: ToolBookingGet, action: `ATPAdminAction::"booking_get"`, scope: ScopeBookingAdmin, risk: registry.RiskLow,
			desc:   "Operators: the whole Booking Object.",
			params: `{"type":"object","required":["booking_object_id"],"additionalProperties":false,"properties":{"booking_object_id":` + bookingIDSchema + `}}`,
			run:    s.bookingGet},
		{name: ToolBookingTransition, action: `ATPAdminAction::"booking_transition"`, scope: ScopeBookingAdmin, risk: registry.RiskHigh,
			desc: "Operators: move a booking to another state (Layer-3 or tool-catalogue name, BOOKING_SUSPENDED, RESUME); illegal transitions and transitions during a HEM escalation are refused.",
			params: `{"type":"object","required":["booking_object_id","to"],"additionalProperties":false,"properties":{
"booking_object_id":` + bookingIDSchema + `,"to":{"type":"string","minLength":1},"reason":{"type":"string"}}}`,
			writes: true, run: s.bookingTransition},
		{name: ToolBookingEvents, action: `ATPAdminAction::"booking_events"`, scope: ScopeBookingAdmin, risk: registry.RiskLow,
			desc: "Operators: the booking's event log (guardrail events included), oldest first, after a sequence number.",
			params: `{"type":"object","required":["booking_object_id"],"additionalProperties":false,"properties":{
"booking_object_id":` + bookingIDSchema + `,"after":{"type":"integer","minimum":0},"limit":{"type":"integer","minimum":1,"maximum":1000}}}`,
			run: s.bookingEvents},
	}
}

func (s *Service) bookingCreate(ctx context.Context, c *worker.Call) (any, error) {
	var a struct {
		Booking   json.RawMessage `json:"booking"`
		AdvanceTo string          `json:"advance_to"`
	}
	if err := bind(c, &a); err != nil {
		return nil, err
	}
	var b booking.Booking
	dec := json.NewDecoder(bytes.NewReader(a.Booking))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return nil, worker.Fail(card.CodeBadRequest, fmt.Sprintf("booking: %v (docs/catalogues/atp.md shows a booking object)", err))
	}
	if b.ID == "" {
		b.ID = booking.NewID() // named here: the call record reads it back
	}
	// The booking and its advance are one transaction: the call record
	// holds the booking as it was created.
	setResult(ctx, func(tx state.Tx) (any, error) {
		raw, found, err := tx.Bucket(c.ProjectID, booking.BucketBookings).Get(b.ID)
		if err != nil || !found {
			return nil, err
		}
		nb := &booking.Booking{}
		if err := json.Unmarshal(raw, nb); err != nil {
			return nil, err
		}
		return view{nb, nb.ToolState()}, nil
	})
	nb, err := s.CreateBooking(ctx, c.ProjectID, &b, a.AdvanceTo, toolkit.Actor(c))
	if err != nil {
		return nil, err
	}
	return view{nb, nb.ToolState()}, nil
}

// view is a Booking Object as the operators' tools return it: every field
// (state is the Layer-3 state) and tool_state, the state the tool
// catalogue and the gate see.
type view struct {
	*booking.Booking
	ToolState string `json:"tool_state"`
}

// CreateBooking creates a booking and walks it to advanceTo
// ("", PENDING_CONFIRMATION, CONFIRMED or PRE_JOURNEY) through the legal
// transitions, each logged, in one transaction. The fixture loader and
// atp_booking_create use it.
func (s *Service) CreateBooking(ctx context.Context, project string, b *booking.Booking, advanceTo, who string) (*booking.Booking, error) {
	var path []booking.State
	switch advanceTo {
	case "":
	case "PENDING_CONFIRMATION":
		path = []booking.State{booking.PendingConfirmation}
	case "CONFIRMED", "PRE_JOURNEY":
		path = []booking.State{booking.PendingConfirmation, booking.Confirmed}
	default:
		return nil, fmt.Errorf("%w: advance_to %q; use PENDING_CONFIRMATION or CONFIRMED (PRE_JOURNEY)", booking.ErrBadInput, advanceTo)
	}
	return s.store.CreateAdvanced(ctx, project, b, who, "created with advance_to "+advanceTo, path)
}

func (s *Service) bookingGet(ctx context.Context, c *worker.Call) (any, error) {
	var a bookingArg
	if err := bind(c, &a); err != nil {
		return nil, err
	}
	b, err := s.store.Get(ctx, c.ProjectID, a.BookingObjectID)
	if err != nil {
		return nil, err
	}
	return view{b, b.ToolState()}, nil
}

func (s *Service) bookingTransition(ctx context.Context, c *worker.Call) (any, error) {
	var a struct {
		bookingArg
		To     string `json:"to"`
		Reason string `json:"reason"`
	}
	if err := bind(c, &a); err != nil {
		return nil, err
	}
	to, err := booking.ParseState(a.To)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	setResult(ctx, resultMap(&out))
	if _, err := s.store.Update(ctx, c.ProjectID, a.BookingObjectID, func(tx *booking.Tx) error {
		out = nil // the closure may run again
		ev, err := tx.Transition(to, toolkit.Actor(c), a.Reason)
		if err != nil {
			return err
		}
		b := tx.Booking
		out = map[string]any{"booking_object_id": b.ID, "state": b.ToolState(), "layer3_state": b.State, "suspended": b.Suspended, "event": ev}
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Service) bookingEvents(ctx context.Context, c *worker.Call) (any, error) {
	var a struct {
		bookingArg
		After uint64 `json:"after"`
		Limit int    `json:"limit"`
	}
	if err := bind(c, &a); err != nil {
		return nil, err
	}
	evs, err := s.store.Events(ctx, c.ProjectID, a.BookingObjectID, a.After, a.Limit, true)
	if err != nil {
		return nil, err
	}
	return map[string]any{"booking_object_id": a.BookingObjectID, "events": evs}, nil
}
