package authz

import (
	"context"
	"os"
	"testing"
)

// bookingFixture is a catalogue shaped like ATP's (services/atp/atpauthz):
// entity Booking, context attributes booking_object_id, booking_state and
// hem_id, actions in the ATPAction namespace. It resolves no resource.
type bookingFixture struct{}

func (bookingFixture) Name() string { return "fixture" }

func (bookingFixture) Schema() SchemaFragment {
	return SchemaFragment{
		Entities: []EntityDecl{{Type: "Booking"}},
		Context:  []string{"booking_object_id", "booking_state", "hem_id"},
		Actions:  []string{`ATPAction::"invoke_hem"`, `ATPAction::"get_booking_status"`},
		State:    "booking_state", Enumerated: []string{"hem_id"},
	}
}

func (bookingFixture) ResolveResource(context.Context, ResourceRequest) (*Resource, error) {
	return nil, nil
}

// TestMain registers the fixture catalogue, as the mesh assembly registers
// the catalogues it serves.
func TestMain(m *testing.M) {
	RegisterCatalogue(bookingFixture{})
	os.Exit(m.Run())
}
