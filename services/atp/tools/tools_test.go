package tools_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/atp/internal/atptest"
	"github.com/utpmesh/utpmesh/services/atp/notify"
	"github.com/utpmesh/utpmesh/services/atp/ratelimit"
	"github.com/utpmesh/utpmesh/services/atp/tools"
)

// smtpServer is a minimal SMTP server on loopback that hands every
// message it accepts to msgs.
func smtpServer(t *testing.T) (addr string, msgs chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	msgs = make(chan string, 10)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				r := bufio.NewReader(c)
				say := func(s string) { _, _ = c.Write([]byte(s + "\r\n")) }
				say("220 test ESMTP")
				var env strings.Builder
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					cmd := strings.ToUpper(strings.TrimSpace(line))
					switch {
					case strings.HasPrefix(cmd, "EHLO"), strings.HasPrefix(cmd, "HELO"):
						say("250 test")
					case strings.HasPrefix(cmd, "MAIL FROM:"), strings.HasPrefix(cmd, "RCPT TO:"):
						env.WriteString(strings.TrimSpace(line) + "\n")
						say("250 ok")
					case cmd == "DATA":
						say("354 go ahead")
						var data strings.Builder
						for {
							l, err := r.ReadString('\n')
							if err != nil {
								return
							}
							if l == ".\r\n" {
								break
							}
							data.WriteString(l)
						}
						msgs <- env.String() + data.String()
						say("250 queued")
					case cmd == "QUIT":
						say("221 bye")
						return
					default:
						say("502 unknown")
					}
				}
			}(conn)
		}
	}()
	return ln.Addr().String(), msgs
}

func webhook(t *testing.T, status int) (*httptest.Server, chan map[string]string, chan http.Header) {
	t.Helper()
	got := make(chan map[string]string, 10)
	hdr := make(chan http.Header, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]string
		_ = json.NewDecoder(r.Body).Decode(&m)
		got <- m
		hdr <- r.Header.Clone()
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"message_id":"prov-123"}`))
	}))
	t.Cleanup(srv.Close)
	return srv, got, hdr
}

func TestSeedToolsThroughTheMesh(t *testing.T) {
	smtpAddr, mails := smtpServer(t)
	hookSrv, hooks, headers := webhook(t, http.StatusOK)
	h := atptest.Start(t, atptest.Options{Notifiers: map[string]atp.Notifier{
		"EMAIL":    &notify.SMTP{Addr: smtpAddr, From: "atp@example.test"},
		"SMS":      &notify.Webhook{URL: hookSrv.URL, Token: "s3cret"},
		"WHATSAPP": &notify.Webhook{URL: hookSrv.URL},
	}})
	ctx := context.Background()
	b, err := h.Service.LoadFixture(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	ag := h.Agent("ops", h.Mandate("ops", atptest.AllTools()))
	id := b.ID

	t.Run("registered with action and scope", func(t *testing.T) {
		want := map[string][2]string{
			tools.ToolGetContextPackage: {`ATPAction::"get_context_package"`, "CONTEXT_READ"},
			tools.ToolNotifyTraveller:   {`ATPAction::"notify_traveller"`, "NOTIFICATION_SEND"},
			tools.ToolUpdatePreArr:      {`ATPAction::"update_pre_arrangement"`, "PRE_ARRANGEMENT_WRITE"},
			tools.ToolCollectPreArr:     {`ATPAction::"collect_pre_arrangement_data"`, "PRE_ARRANGEMENT_WRITE"},
			tools.ToolRecordSafetyCheck: {`ATPAction::"record_safety_check"`, "SAFETY_WRITE"},
			tools.ToolSearchActivities:  {`ATPAction::"search_activities"`, "BOOKING_READ"},
			tools.ToolGetBookingStatus:  {`ATPAction::"get_booking_status"`, "CONTEXT_READ"},
		}
		for _, tl := range h.Mesh.Runtime().Tools() {
			if w, ok := want[tl.Name]; ok {
				e, err := h.Mesh.Registry().Get(ctx, atptest.Project, tl.Name)
				if err != nil {
					t.Fatal(err)
				}
				if e.Options.CedarAction != w[0] || len(e.Options.Scopes) != 1 || e.Options.Scopes[0] != w[1] || !strings.HasSuffix(e.TargetSubject, ".cmd.tool.atp."+tl.Name) {
					t.Errorf("%s: %+v", tl.Name, e.Options)
				}
				delete(want, tl.Name)
			}
		}
		if len(want) > 0 {
			t.Fatalf("not served: %v", want)
		}
	})

	t.Run("status", func(t *testing.T) {
		st := ag.OK(tools.ToolGetBookingStatus, map[string]any{"booking_object_id": id}).Obj()
		// 2 participants × 3 fields, none set yet.
		if st["state"] != "PRE_JOURNEY" || st["layer3_state"] != "CONFIRMED" || st["outstanding_pre_arrangements_count"] != float64(6) ||
			len(st["pending_hem_tasks"].([]any)) != 0 || st["last_event_timestamp"] == "" {
			t.Fatalf("status = %v", st)
		}
	})

	t.Run("collect and update pre-arrangements", func(t *testing.T) {
		all := ag.OK(tools.ToolCollectPreArr, map[string]any{"booking_object_id": id, "filter": "ALL"}).Value.([]any)
		if len(all) != 6 || atptest.Str(all[0], "schema_fragment") != "" && all[0].(map[string]any)["schema_fragment"] == nil {
			t.Fatalf("manifest = %v", all)
		}
		up := ag.OK(tools.ToolUpdatePreArr, map[string]any{"booking_object_id": id, "participant_id": "p-aiko", "field_key": "boot_size_eu", "field_value": 38, "source": "GUEST"}).Obj()
		if up["previous_value"] != nil || atptest.Get(up, "validation_result", "valid") != true || !strings.HasPrefix(atptest.Str(up, "event_log_entry_id"), id+"/") {
			t.Fatalf("update = %v", up)
		}
		again := ag.OK(tools.ToolUpdatePreArr, map[string]any{"booking_object_id": id, "participant_id": "p-aiko", "field_key": "boot_size_eu", "field_value": 39, "source": "GUEST"}).Obj()
		if again["previous_value"] != float64(38) {
			t.Fatalf("second update = %v", again)
		}
		bad := ag.Fail(tools.ToolUpdatePreArr, map[string]any{"booking_object_id": id, "participant_id": "p-aiko", "field_key": "skill_level", "field_value": "PRO", "source": "GUEST"}, card.CodeBadRequest)
		if !strings.Contains(bad.Message, "skill_level") || !strings.Contains(string(bad.Detail), `"valid":false`) {
			t.Fatalf("invalid value: %+v", bad)
		}
		for _, tc := range []struct {
			args map[string]any
			want string
		}{
			{map[string]any{"participant_id": "p-zed", "field_key": "dietary", "field_value": "x"}, "p-aiko, p-ben"},
			{map[string]any{"participant_id": "p-ben", "field_key": "shoe", "field_value": "x"}, "boot_size_eu, dietary, skill_level"},
		} {
			tc.args["booking_object_id"], tc.args["source"] = id, "AGENT"
			if e := ag.Fail(tools.ToolUpdatePreArr, tc.args, card.CodeBadRequest); !strings.Contains(e.Message, tc.want) {
				t.Errorf("%v: %s", tc.args, e.Message)
			}
		}
		for filter, n := range map[string]int{"ALL": 6, "OUTSTANDING": 5, "REQUIRED_OUTSTANDING": 3} {
			got := ag.OK(tools.ToolCollectPreArr, map[string]any{"booking_object_id": id, "filter": filter}).Value.([]any)
			if len(got) != n {
				t.Errorf("%s: %d items, want %d", filter, len(got), n)
			}
		}
	})

	t.Run("context package", func(t *testing.T) { // ops holds BOOKING_READ (search_activities): payment included
		full := ag.OK(tools.ToolGetContextPackage, map[string]any{"booking_object_id": id}).Obj()
		if full["state"] != "PRE_JOURNEY" || len(full["itinerary"].([]any)) != 2 || len(full["meeting_points"].([]any)) != 1 ||
			atptest.Str(full, "payment", "currency") != "JPY" || full["withheld_fields"] != nil || atptest.Get(full, "event_log_summary", "count") == nil {
			t.Fatalf("package = %v", full)
		}
		sub := ag.OK(tools.ToolGetContextPackage, map[string]any{"booking_object_id": id, "fields": []string{"seller_contacts"}}).Obj()
		if len(sub) != 1 || sub["seller_contacts"] == nil {
			t.Fatalf("subset = %v", sub)
		}
	})

	t.Run("safety check never moves the booking", func(t *testing.T) {
		r := ag.OK(tools.ToolRecordSafetyCheck, map[string]any{"booking_object_id": id, "check_type": "EQUIPMENT_FIT", "subject": "p-aiko", "outcome": "PASS", "checked_by": "desk"}).Obj()
		if r["booking_object_status_unchanged"] != true || !strings.HasPrefix(atptest.Str(r, "safety_check_id"), "sc_") {
			t.Fatalf("safety = %v", r)
		}
		ag.Fail(tools.ToolRecordSafetyCheck, map[string]any{"booking_object_id": id, "check_type": "WEATHER_GO_NOGO", "subject": "lesson-1", "outcome": "PASS", "checked_by": "desk"}, card.CodeBadRequest)
		st := ag.OK(tools.ToolGetBookingStatus, map[string]any{"booking_object_id": id}).Obj()
		if st["state"] != "PRE_JOURNEY" {
			t.Fatalf("state after safety check = %v", st["state"])
		}
	})

	t.Run("search", func(t *testing.T) {
		for _, tc := range []struct {
			args map[string]any
			want string
		}{
			{map[string]any{}, "act-onsen,act-ski-lesson,act-snowshoe"},
			{map[string]any{"category": "ski"}, "act-ski-lesson"},
			{map[string]any{"query": "hot-spring dinner"}, "act-onsen"},
			{map[string]any{"participants": 6}, "act-ski-lesson,act-snowshoe"},
		} {
			var ids []string
			for _, a := range ag.OK(tools.ToolSearchActivities, tc.args).Value.([]any) {
				ids = append(ids, atptest.Str(a, "activity_id"))
				if atptest.Str(a, "source") != "ATP_NATIVE" || atptest.Get(a, "pricing_snapshot") == nil || atptest.Str(a, "operator_id") == "" {
					t.Fatalf("declaration = %v", a)
				}
			}
			if strings.Join(ids, ",") != tc.want {
				t.Errorf("%v: %v, want %s", tc.args, ids, tc.want)
			}
		}
	})

	t.Run("notify by email, sms and whatsapp", func(t *testing.T) {
		r := ag.OK(tools.ToolNotifyTraveller, map[string]any{"booking_object_id": id, "recipient_participant_id": "p-aiko", "channel": "EMAIL", "message_body": "Meet at the gondola at 08:45"}).Obj()
		if !strings.HasPrefix(atptest.Str(r, "notification_id"), "ntf_") || r["delivery_status"] != "SENT" || r["attributed_to"] != "atp-runtime" {
			t.Fatalf("notify = %v", r)
		}
		mail := <-mails
		if !strings.Contains(mail, "RCPT TO:<aiko@example.test>") || !strings.Contains(mail, "Meet at the gondola at 08:45") {
			t.Fatalf("mail = %q", mail)
		}
		r = ag.OK(tools.ToolNotifyTraveller, map[string]any{"booking_object_id": id, "recipient_participant_id": "p-aiko", "channel": "SMS", "message_body": "Lesson moved to 10:00"}).Obj()
		got, hdr := <-hooks, <-headers
		if got["to"] != "+81000000001" || got["channel"] != "SMS" || got["body"] != "Lesson moved to 10:00" || r["provider_message_id"] != "prov-123" ||
			hdr.Get("Authorization") != "Bearer s3cret" || hdr.Get("Idempotency-Key") != r["notification_id"] {
			t.Fatalf("webhook got %v %v; result %v", got, hdr, r)
		}
		if e := ag.Fail(tools.ToolNotifyTraveller, map[string]any{"booking_object_id": id, "recipient_participant_id": "p-ben", "channel": "WHATSAPP", "message_body": "x"}, card.CodeBadRequest); !strings.Contains(e.Message, "EMAIL") {
			t.Fatalf("no address: %s", e.Message)
		}
		evs, err := h.Service.Store().Events(ctx, atptest.Project, id, 0, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range evs {
			if e.Type == booking.EventNotification && strings.Contains(string(e.Data), `"delivery_status":"SENT"`) {
				n++
			}
		}
		if n != 2 {
			t.Fatalf("%d NotificationEvents, want 2", n)
		}
	})

	t.Run("wrong state names the state required and found", func(t *testing.T) {
		ag.OK(tools.ToolBookingTransition, map[string]any{"booking_object_id": id, "to": "JOURNEY", "reason": "guests arrived"})
		for _, tc := range []struct {
			tool string
			args map[string]any
		}{
			{tools.ToolUpdatePreArr, map[string]any{"participant_id": "p-aiko", "field_key": "dietary", "field_value": "none", "source": "GUEST"}},
			{tools.ToolCollectPreArr, map[string]any{"filter": "ALL"}},
		} {
			tc.args["booking_object_id"] = id
			e := ag.Fail(tc.tool, tc.args, tools.CodeWrongState)
			var d tools.WrongStateDetail
			if err := json.Unmarshal(e.Detail, &d); err != nil || d.BookingState != "JOURNEY" || len(d.RequiredStates) != 1 || d.RequiredStates[0] != "PRE_JOURNEY" ||
				!strings.Contains(e.Message, "needs booking "+id+" in PRE_JOURNEY; it is in JOURNEY") {
				t.Errorf("%s: %+v", tc.tool, e)
			}
		}
		ag.OK(tools.ToolRecordSafetyCheck, map[string]any{"booking_object_id": id, "check_type": "WEATHER_GO_NOGO", "subject": "lesson-1", "outcome": "GO", "checked_by": "guide"})
		ag.OK(tools.ToolBookingTransition, map[string]any{"booking_object_id": id, "to": "COMPLETION"})
		e := ag.Fail(tools.ToolNotifyTraveller, map[string]any{"booking_object_id": id, "recipient_participant_id": "p-aiko", "channel": "EMAIL", "message_body": "x"}, tools.CodeWrongState)
		if !strings.Contains(e.Message, "PRE_JOURNEY or JOURNEY or DISRUPTION_REVIEW; it is in COMPLETION") {
			t.Fatalf("notify after completion: %s", e.Message)
		}
		ag.Fail(tools.ToolBookingTransition, map[string]any{"booking_object_id": id, "to": "JOURNEY"}, tools.CodeIllegalTransition)
	})

	t.Run("context package needs a confirmed booking", func(t *testing.T) {
		nb := ag.OK(tools.ToolBookingCreate, map[string]any{"booking": map[string]any{"title": "draft", "participants": []any{map[string]any{"participant_id": "x", "name": "X"}}}}).Obj()
		e := ag.Fail(tools.ToolGetContextPackage, map[string]any{"booking_object_id": nb["booking_object_id"]}, tools.CodeWrongState)
		if !strings.Contains(e.Message, "it is in INQUIRY") || !strings.Contains(e.Message, "post-CONFIRMATION") {
			t.Fatalf("inquiry: %s", e.Message)
		}
		ag.Fail(tools.ToolGetBookingStatus, map[string]any{"booking_object_id": booking.NewID()}, card.CodeBadRequest)
		ag.Fail(tools.ToolBookingCreate, map[string]any{"booking": map[string]any{"titel": "typo"}}, card.CodeBadRequest)
	})
}

func TestNotifyDeliveryFailureIsLogged(t *testing.T) {
	hookSrv, hooks, _ := webhook(t, http.StatusBadGateway)
	h := atptest.Start(t, atptest.Options{Notifiers: map[string]atp.Notifier{"SMS": &notify.Webhook{URL: hookSrv.URL}}})
	ctx := context.Background()
	b, err := h.Service.LoadFixture(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	ag := h.Agent("ops", h.Mandate("ops", atptest.AllTools()))
	e := ag.Fail(tools.ToolNotifyTraveller, map[string]any{"booking_object_id": b.ID, "recipient_participant_id": "p-aiko", "channel": "SMS", "message_body": "hi"}, card.CodeUpstreamUnavailable)
	<-hooks
	if !strings.Contains(e.Message, "502") {
		t.Fatalf("message = %s", e.Message)
	}
	if e := ag.Fail(tools.ToolNotifyTraveller, map[string]any{"booking_object_id": b.ID, "recipient_participant_id": "p-aiko", "channel": "EMAIL", "message_body": "hi"}, card.CodeUpstreamUnavailable); !strings.Contains(e.Message, "no EMAIL provider") {
		t.Fatalf("unconfigured: %s", e.Message)
	}
	// Both failures are in the log with their channel and outcome.
	evs, _ := h.Service.Store().Events(ctx, atptest.Project, b.ID, 0, 0, false)
	for i, want := range []string{`"channel":"SMS"`, `"channel":"EMAIL"`} {
		ev := evs[len(evs)-2+i]
		if ev.Type != booking.EventNotification || !strings.Contains(string(ev.Data), `"delivery_status":"FAILED"`) || !strings.Contains(string(ev.Data), want) {
			t.Fatalf("event %d = %+v %s; want a FAILED notification with %s", i, ev, ev.Data, want)
		}
	}
}

// TestPolicyOnBookingStateThroughTheGate: the project permits safety
// checks only in PRE_JOURNEY; the tool itself accepts JOURNEY too, so a
// denial in JOURNEY is the gate reading the state from the service.
func TestPolicyOnBookingStateThroughTheGate(t *testing.T) {
	h := atptest.Start(t, atptest.Options{ProjectPolicy: `permit(principal, action in [ATPAdminAction::"booking_transition", ATPAction::"get_booking_status"], resource in Project::"demo");
@id("safety-pre-journey")
permit(principal, action == ATPAction::"record_safety_check", resource in Project::"demo") when { context.booking_state == "PRE_JOURNEY" };`})
	ctx := context.Background()
	b, err := h.Service.LoadFixture(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	ag := h.Agent("ops", h.Mandate("ops", atptest.AllTools()))
	check := map[string]any{"booking_object_id": b.ID, "check_type": "EQUIPMENT_FIT", "subject": "p-ben", "outcome": "PASS", "checked_by": "desk"}
	ag.OK(tools.ToolRecordSafetyCheck, check)
	ag.OK(tools.ToolBookingTransition, map[string]any{"booking_object_id": b.ID, "to": "IN_JOURNEY"})
	e := ag.Fail(tools.ToolRecordSafetyCheck, check, card.CodeAuthFailed)
	var d authz.AuthFailedDetail
	if err := json.Unmarshal(e.Detail, &d); err != nil || d.Reason != authz.ReasonProjectPolicy || d.ResourceID != b.ID {
		t.Fatalf("denial = %+v (%v)", e, err)
	}
	ag.OK(tools.ToolBookingTransition, map[string]any{"booking_object_id": b.ID, "to": "DISRUPTION_REVIEW"})
	ag.OK(tools.ToolBookingTransition, map[string]any{"booking_object_id": b.ID, "to": "JOURNEY"})
	ag.Fail(tools.ToolRecordSafetyCheck, check, card.CodeAuthFailed)
}

func TestPaymentNeedsBookingRead(t *testing.T) {
	h := atptest.Start(t, atptest.Options{})
	ctx := context.Background()
	b, err := h.Service.LoadFixture(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	reader := h.Agent("reader", h.Mandate("reader", `permit(principal, action == ATPAction::"get_context_package", resource);`))
	full := reader.OK(tools.ToolGetContextPackage, map[string]any{"booking_object_id": b.ID}).Obj()
	if full["payment"] != nil || atptest.Get(full, "withheld_fields", 0) != "payment" {
		t.Fatalf("payment leaked: %v", full)
	}
	e := reader.Fail(tools.ToolGetContextPackage, map[string]any{"booking_object_id": b.ID, "fields": []string{"payment"}}, card.CodeAuthFailed)
	var d tools.ScopeDenial
	if err := json.Unmarshal(e.Detail, &d); err != nil || d.Error != "mandate_scope_violation" || d.RequiredScope != "BOOKING_READ" || d.ATPErrorCode != "MCP-403-SCOPE" || len(d.MandateScopes) != 1 {
		t.Fatalf("denial = %+v (%v)", e, err)
	}
	both := h.Agent("both", h.Mandate("both", `permit(principal, action in [ATPAction::"get_context_package", ATPAction::"search_activities"], resource);`))
	got := both.OK(tools.ToolGetContextPackage, map[string]any{"booking_object_id": b.ID, "fields": []string{"payment"}}).Obj()
	if atptest.Get(got, "payment", "total") != float64(84000) {
		t.Fatalf("payment = %v", got)
	}
}

func TestCheckScope(t *testing.T) {
	for name, want := range map[string]string{"NOTIFY": "use NOTIFICATION_SEND", "JOURNEY_READ": "use CONTEXT_READ", "READ": "unknown ATP scope", "CONTEXT_READ": ""} {
		err := tools.CheckScope(name)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestRateLimitThroughTheMesh(t *testing.T) {
	h := atptest.Start(t, atptest.Options{RateLimits: func(string) ratelimit.Limits { return ratelimit.Limits{CallsPerMinute: 3} }})
	ctx := context.Background()
	b, err := h.Service.LoadFixture(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	tok := h.Mandate("busy", atptest.AllTools())
	busy := h.Agent("busy", tok)
	status := map[string]any{"booking_object_id": b.ID}
	for i := 0; i < 3; i++ {
		busy.OK(tools.ToolGetBookingStatus, status)
	}
	e := busy.Fail(tools.ToolGetBookingStatus, status, tools.CodeRateLimited)
	var d tools.RateLimitDetail
	if err := json.Unmarshal(e.Detail, &d); err != nil || d.Limit != "calls_per_minute" || d.Max != 3 || d.RetryAfterSeconds < 1 || d.RetryAfterSeconds > 60 || d.ATPErrorCode != "MCP-429-RATE" {
		t.Fatalf("limited = %+v (%v)", e, err)
	}
	if !strings.Contains(e.Message, "retry after") {
		t.Fatalf("message = %s", e.Message)
	}
	other := h.Agent("other", h.Mandate("other", atptest.AllTools()))
	other.OK(tools.ToolGetBookingStatus, status) // limits are per client
	h.Clock.Add(time.Minute)
	busy.OK(tools.ToolGetBookingStatus, status)
}

// TestRetiredScopeInTheRegistry: scopes enter the mesh with a tool's
// registry entry; an ATP entry re-registered with a retired scope name
// fails its calls, naming the normative one (MCP-D4).
func TestRetiredScopeInTheRegistry(t *testing.T) {
	h := atptest.Start(t, atptest.Options{})
	ctx := context.Background()
	b, err := h.Service.LoadFixture(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	e, err := h.Mesh.Registry().Get(ctx, atptest.Project, tools.ToolCollectPreArr)
	if err != nil {
		t.Fatal(err)
	}
	e.Options.Scopes = []string{"JOURNEY_READ"}
	if _, err := h.Mesh.Registry().Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	ag := h.Agent("ops", h.Mandate("ops", atptest.AllTools()))
	got := ag.Fail(tools.ToolCollectPreArr, map[string]any{"booking_object_id": b.ID, "filter": "ALL"}, card.CodeBadRequest)
	if !strings.Contains(got.Message, "JOURNEY_READ") || !strings.Contains(got.Message, "use CONTEXT_READ") {
		t.Fatalf("message = %s", got.Message)
	}
}
