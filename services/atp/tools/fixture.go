package tools

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/utpmesh/utpmesh/services/atp/booking"
)

// FixtureBooking is the demo booking: a two-person ski week with three
// pre-arrangement fields (boot size, dietary needs, skill level).
func FixtureBooking() *booking.Booking {
	return &booking.Booking{
		Title: "Niseko ski week (demo)",
		Itinerary: []booking.Item{
			{ItemID: "lesson-1", ActivityID: "act-ski-lesson", Title: "Half-day ski lesson", Start: "2027-01-18T09:00:00+09:00", End: "2027-01-18T12:00:00+09:00", Location: "Niseko Hirafu", SupplierID: "sup-niseko-snow"},
			{ItemID: "onsen-1", ActivityID: "act-onsen", Title: "Onsen evening", Start: "2027-01-18T18:00:00+09:00", Location: "Kutchan", SupplierID: "sup-kutchan-onsen"},
		},
		Participants: []booking.Participant{
			{ParticipantID: "p-aiko", Name: "Aiko Tanaka", Email: "aiko@example.test", Phone: "+81000000001", WhatsApp: "+81000000001"},
			{ParticipantID: "p-ben", Name: "Ben Carter", Email: "ben@example.test"},
		},
		SellerContacts: []booking.Contact{{Name: "Niseko Snow School desk", Role: "supplier", Email: "desk@niseko-snow.example.test", Phone: "+81000000099"}},
		MeetingPoints:  []booking.MeetingPoint{{ItemID: "lesson-1", Name: "Hirafu gondola base", Address: "Niseko Hirafu 1-jo", Time: "08:45", Instruction: "Look for the orange flag"}},
		Fields: []booking.FieldDef{
			{Key: "boot_size_eu", Label: "Ski boot size (EU)", Type: "integer", Required: true, Schema: json.RawMessage(`{"type":"integer","minimum":30,"maximum":50}`)},
			{Key: "skill_level", Label: "Skiing level", Type: "enum", Required: true, Schema: json.RawMessage(`{"enum":["BEGINNER","INTERMEDIATE","ADVANCED"]}`)},
			{Key: "dietary", Label: "Dietary requirements", Type: "string", Schema: json.RawMessage(`{"type":"string","maxLength":200}`)},
		},
		Payment: json.RawMessage(`{"currency":"JPY","total":84000,"paid":42000,"method":"card","last4":"4242"}`),
		Flags:   []string{},
	}
}

// FixtureActivities are the demo activity registry.
func FixtureActivities() []Activity {
	return []Activity{
		{ActivityID: "act-ski-lesson", Title: "Half-day ski lesson", Description: "Group lesson, all levels, boots and skis included", Category: "SKI",
			OperatorID: "sup-niseko-snow", Location: "Niseko Hirafu", PricingSnapshot: json.RawMessage(`{"currency":"JPY","amount":12000,"per":"PERSON"}`),
			AvailabilityStatus: "AVAILABLE", Capacity: 8},
		{ActivityID: "act-onsen", Title: "Onsen evening", Description: "Private hot-spring bath with dinner", Category: "WELLNESS",
			OperatorID: "sup-kutchan-onsen", Location: "Kutchan", PricingSnapshot: json.RawMessage(`{"currency":"JPY","amount":6000,"per":"PERSON"}`),
			AvailabilityStatus: "LIMITED", Capacity: 4},
		{ActivityID: "act-snowshoe", Title: "Snowshoe night walk", Description: "Guided walk in the forest", Category: "SNOWSHOE",
			OperatorID: "sup-niseko-snow", Location: "Niseko Annupuri", PricingSnapshot: json.RawMessage(`{"currency":"JPY","amount":5000,"per":"PERSON"}`),
			AvailabilityStatus: "SOLD_OUT"},
	}
}

// LoadFixture loads the demo activities and, when the project has no
// booking yet, creates the demo booking in PRE_JOURNEY (CONFIRMED). It
// returns the project's first booking.
func (s *Service) LoadFixture(ctx context.Context, project string) (*booking.Booking, error) {
	for _, a := range FixtureActivities() {
		if err := s.PutActivity(ctx, project, a); err != nil {
			return nil, err
		}
	}
	have, err := s.store.List(ctx, project)
	if err != nil {
		return nil, err
	}
	if len(have) > 0 {
		return have[0], nil
	}
	// One id for the demo booking: the nodes of a cluster, which share the
	// state and load the fixture at once, make one booking, not three.
	fb := FixtureBooking()
	fb.ID = FixtureBookingID
	b, err := s.CreateBooking(ctx, project, fb, "CONFIRMED", "fixture")
	if errors.Is(err, booking.ErrBadInput) {
		if got, gerr := s.store.Get(ctx, project, FixtureBookingID); gerr == nil {
			return got, nil // another worker made it meanwhile
		}
	}
	return b, err
}

// FixtureBookingID is the demo booking's id (a UUIDv7).
const FixtureBookingID = "0190f3a2-5d1e-7c0d-8e5a-000000000001"
