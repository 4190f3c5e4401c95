package tools_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/atp/hem"
	"github.com/utpmesh/utpmesh/services/atp/internal/atptest"
	"github.com/utpmesh/utpmesh/services/atp/notify"
	"github.com/utpmesh/utpmesh/services/atp/rails"
	"github.com/utpmesh/utpmesh/services/atp/tools"
)

func guardrailDetail(t *testing.T, e *card.Error) map[string]string {
	t.Helper()
	var d map[string]string
	if err := json.Unmarshal(e.Detail, &d); err != nil || d["atp_error_code"] != "MCP-422-GUARDRAIL" {
		t.Fatalf("detail = %s (%v)", e.Detail, err)
	}
	return d
}

func countTypes(evs []booking.Event) map[string]int {
	n := map[string]int{}
	for _, e := range evs {
		n[e.Type]++
	}
	return n
}

func TestRail2BlocksAndLogs(t *testing.T) {
	hookSrv, hooks, _ := webhook(t, http.StatusOK)
	h := atptest.Start(t, atptest.Options{
		Notifiers: map[string]atp.Notifier{"SMS": &notify.Webhook{URL: hookSrv.URL}},
		ContentRules: func(project string) []rails.ContentRule {
			if project == atptest.Project {
				return append(rails.DefaultContentRules(), rails.ContentRule{ID: "no-refund-promises", Pattern: `(?i)\brefund\b`, Reason: "refunds are promised by the operator only"})
			}
			return nil
		}})
	ctx := context.Background()
	b, err := h.Service.LoadFixture(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	ag := h.Agent("ops", h.Mandate("ops", atptest.AllTools()))
	send := func(body string) *atptest.Result {
		return ag.Call(tools.ToolNotifyTraveller, map[string]any{"booking_object_id": b.ID, "recipient_participant_id": "p-aiko", "channel": "SMS", "message_body": body})
	}
	for _, tc := range []struct{ body, rule string }{
		{"Please confirm card 4242 4242 4242 4242", "no-card-numbers"},
		{"Reply with your PIN code", "no-credential-requests"},
		{"You will get a full Refund", "no-refund-promises"},
	} {
		r := send(tc.body)
		if r.Status != card.StatusFailed || r.Error.Code != tools.CodeGuardrail {
			t.Fatalf("%q: %s %+v", tc.body, r.Status, r.Error)
		}
		if d := guardrailDetail(t, r.Error); d["rule_id"] != tc.rule || d["rail"] != rails.Rail2 {
			t.Fatalf("%q: %v", tc.body, d)
		}
	}
	if r := send("See you at 08:45"); r.Status != card.StatusSuccess {
		t.Fatalf("clean message: %+v", r.Error)
	}
	if got := <-hooks; got["body"] != "See you at 08:45" {
		t.Fatalf("the provider got %v first: a blocked message was sent", got)
	}
	ops, _ := h.Service.Store().Events(ctx, atptest.Project, b.ID, 0, 0, true)
	public, _ := h.Service.Store().Events(ctx, atptest.Project, b.ID, 0, 0, false)
	if n := countTypes(ops); n[booking.EventGuardrail] != 3 || n[booking.EventNotification] != 4 {
		t.Fatalf("operator log = %v", n)
	}
	for _, e := range public {
		if e.Type == booking.EventGuardrail || strings.Contains(string(e.Data), "4242") {
			t.Fatalf("non-operators see %+v", e)
		}
	}
	// The operators' tool shows guardrail events; the agent's context package does not count them.
	all := ag.OK(tools.ToolBookingEvents, map[string]any{"booking_object_id": b.ID}).Obj()
	if !strings.Contains(string(mustJSON(t, all)), `"GUARDRAIL"`) {
		t.Fatal("atp_booking_events hides guardrail events")
	}
	pkg := ag.OK(tools.ToolGetContextPackage, map[string]any{"booking_object_id": b.ID, "fields": []string{"event_log_summary"}}).Obj()
	if atptest.Get(pkg, "event_log_summary", "by_type", "GUARDRAIL") != nil {
		t.Fatalf("summary = %v", pkg)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRail1NeedsLowerInterventionAndWeatherCheck(t *testing.T) {
	cat := hem.Default()
	if err := cat.Add(hem.Entry{HEMID: "HEM-WX", Title: "Weather cancellation of an outdoor activity", Priority: "P2", Deadline: "PT1H",
		States: []string{booking.ToolPreJourney, booking.ToolJourney}, NeedsBooking: true, Outcome: "ACTIVITY_RESCHEDULED",
		Secondary: hem.Secondary{Status: hem.StatusDeclined, Description: "keep the activity; the supplier decides on site"},
		Rail1:     &rails.EscalationRule{LowerInterventions: []string{booking.EventNotification}, SafetyCheck: "WEATHER_GO_NOGO"}}); err != nil {
		t.Fatal(err)
	}
	h := atptest.Start(t, atptest.Options{HEMCatalogue: cat, ProjectPolicy: atptest.AllTools("HEM-WX"),
		Notifiers: map[string]atp.Notifier{"EMAIL": &notify.SMTP{Addr: mustSMTP(t), From: "atp@example.test"}}})
	ctx := context.Background()
	b, err := h.Service.LoadFixture(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	ag := h.Agent("guide", h.Mandate("guide", atptest.AllTools("HEM-WX")))
	draft := ag.OK(tools.ToolBookingCreate, map[string]any{"booking": map[string]any{"title": "draft"}}).Obj()
	if e := ag.Fail(tools.ToolInvokeHEM, invokeArgs(atptest.Str(draft, "booking_object_id"), "HEM-WX", "WEATHER_RED_WARNING"), tools.CodeWrongState); !strings.Contains(e.Message, "PRE_JOURNEY or JOURNEY; it is in INQUIRY") {
		t.Fatalf("HEM precondition: %s", e.Message)
	}
	invoke := invokeArgs(b.ID, "HEM-WX", "WEATHER_RED_WARNING")
	e := ag.Fail(tools.ToolInvokeHEM, invoke, tools.CodeGuardrail)
	if d := guardrailDetail(t, e); d["rule_id"] != "HEM-WX:lower-intervention" || d["rail"] != rails.Rail1 {
		t.Fatalf("first: %v", d)
	}
	ag.OK(tools.ToolNotifyTraveller, map[string]any{"booking_object_id": b.ID, "recipient_participant_id": "p-aiko", "channel": "EMAIL", "message_body": "Storm expected, stay tuned"})
	e = ag.Fail(tools.ToolInvokeHEM, invoke, tools.CodeGuardrail)
	if d := guardrailDetail(t, e); d["rule_id"] != "HEM-WX:safety-check" || !strings.Contains(e.Message, "WEATHER_GO_NOGO") {
		t.Fatalf("second: %v %s", d, e.Message)
	}
	ag.OK(tools.ToolRecordSafetyCheck, map[string]any{"booking_object_id": b.ID, "check_type": "WEATHER_GO_NOGO", "subject": "lesson-1", "outcome": "NO_GO", "checked_by": "guide"})
	if out := ag.OK(tools.ToolInvokeHEM, invoke).Obj(); out["status"] != "PENDING" {
		t.Fatalf("third: %v", out)
	}
	ops, _ := h.Service.Store().Events(ctx, atptest.Project, b.ID, 0, 0, true)
	if n := countTypes(ops); n[booking.EventGuardrail] != 2 || n[booking.EventHEMInvoked] != 1 {
		t.Fatalf("log = %v", n)
	}
}

func mustSMTP(t *testing.T) string {
	addr, msgs := smtpServer(t)
	go func() {
		for range msgs {
		}
	}()
	return addr
}
