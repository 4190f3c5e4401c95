package rails_test

import (
	"encoding/json"
	"testing"

	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/atp/rails"
)

func TestContentRules(t *testing.T) {
	c, err := rails.NewContent(rails.DefaultContentRules())
	if err != nil {
		t.Fatal(err)
	}
	for body, want := range map[string]string{
		"card 4111-1111-1111-1111 please": "no-card-numbers",
		"what's your password?":           "no-credential-requests",
		"Meet at gate 4 at 08:45":         "",
		"Call +81 3 1234 5678":            "",
	} {
		v := c.Check(body)
		if (v == nil) != (want == "") || (v != nil && v.RuleID != want) {
			t.Errorf("%q: %+v, want %q", body, v, want)
		}
	}
	if _, err := rails.NewContent([]rails.ContentRule{{ID: "bad", Pattern: "("}}); err == nil {
		t.Fatal("a bad pattern compiled")
	}
}

func TestEscalationRule(t *testing.T) {
	r := &rails.EscalationRule{LowerInterventions: []string{booking.EventNotification}, SafetyCheck: "WEATHER_GO_NOGO"}
	notif := booking.Event{Type: booking.EventNotification}
	check := func(ct string) booking.Event {
		d, _ := json.Marshal(map[string]string{"check_type": ct})
		return booking.Event{Type: booking.EventSafetyCheck, Data: d}
	}
	for _, tc := range []struct {
		log  []booking.Event
		want string
	}{
		{nil, "HEM-X:lower-intervention"},
		{[]booking.Event{notif}, "HEM-X:safety-check"},
		{[]booking.Event{notif, check("EQUIPMENT_FIT")}, "HEM-X:safety-check"},
		{[]booking.Event{check("WEATHER_GO_NOGO"), notif}, ""},
	} {
		v := rails.CheckEscalation("HEM-X", r, tc.log)
		if (v == nil) != (tc.want == "") || (v != nil && v.RuleID != tc.want) {
			t.Errorf("%v: %+v, want %q", tc.log, v, tc.want)
		}
	}
	if rails.CheckEscalation("HEM-X", nil, nil) != nil {
		t.Fatal("no rule blocked")
	}
}
