package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atp/atpauthz"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// Tool names of the seed (section 4.4).
const (
	ToolGetContextPackage = "atp_get_context_package"
	ToolNotifyTraveller   = "atp_notify_traveller"
	ToolUpdatePreArr      = "atp_update_pre_arrangement"
	ToolCollectPreArr     = "atp_collect_pre_arrangement_data"
	ToolInvokeHEM         = "atp_invoke_hem"
	ToolRecordSafetyCheck = "atp_record_safety_check"
	ToolSearchActivities  = "atp_search_activities"
	ToolGetBookingStatus  = "atp_get_booking_status"
)

const bookingIDSchema = `{"type":"string","format":"uuid","description":"Booking Object id (UUIDv7)"}`

// ContextFields are the parts of a Context Package atp_get_context_package
// can return ("payment" needs BOOKING_READ as well).
var ContextFields = []string{"booking_object_id", "state", "title", "itinerary", "participants", "seller_contacts",
	"meeting_points", "pre_arrangements", "active_flags", "event_log_summary", "payment"}

func (s *Service) seedTools() []spec {
	return []spec{
		{name: ToolGetContextPackage, action: `ATPAction::"get_context_package"`, scope: ScopeContextRead, risk: registry.RiskLow,
			desc: "Full Context Package of a confirmed booking: itinerary, participants, seller contacts, pre-arrangement state, meeting points, event log summary. fields selects a subset; payment needs the BOOKING_READ scope as well.",
			params: `{"type":"object","required":["booking_object_id"],"additionalProperties":false,"properties":{
"booking_object_id":` + bookingIDSchema + `,
"fields":{"type":"array","items":{"enum":["booking_object_id","state","title","itinerary","participants","seller_contacts","meeting_points","pre_arrangements","active_flags","event_log_summary","payment"]},"uniqueItems":true}}}`,
			run: s.getContextPackage},
		{name: ToolUpdatePreArr, action: `ATPAction::"update_pre_arrangement"`, scope: ScopePreArrangement, risk: registry.RiskMedium,
			desc: "Set one pre-arrangement field (dietary, equipment sizes, skill level, insurance, accessibility…) of a participant, validated against the activity's schema fragment. PRE_JOURNEY only.",
			params: `{"type":"object","required":["booking_object_id","participant_id","field_key","field_value","source"],"additionalProperties":false,"properties":{
"booking_object_id":` + bookingIDSchema + `,"participant_id":{"type":"string","minLength":1},"field_key":{"type":"string","minLength":1},
"field_value":{},"source":{"type":"string","minLength":1,"description":"who supplied the value, e.g. GUEST, AGENT, SUPPLIER"}}}`,
			writes: true, run: s.updatePreArrangement},
		{name: ToolCollectPreArr, action: `ATPAction::"collect_pre_arrangement_data"`, scope: ScopePreArrangement, risk: registry.RiskLow,
			desc: "The pre-arrangement collection manifest: per participant and field, required or optional, current value and the schema fragment governing it. PRE_JOURNEY only.",
			params: `{"type":"object","required":["booking_object_id","filter"],"additionalProperties":false,"properties":{
"booking_object_id":` + bookingIDSchema + `,"filter":{"enum":["ALL","OUTSTANDING","REQUIRED_OUTSTANDING"]}}}`,
			run: s.collectPreArrangement},
		{name: ToolRecordSafetyCheck, action: `ATPAction::"record_safety_check"`, scope: ScopeSafetyWrite, risk: registry.RiskMedium,
			desc: "Record a safety compliance check (equipment fit, medical clearance, age, skill, weather go/no-go) in the booking's immutable log. Never changes the booking's state. PRE_JOURNEY or JOURNEY.",
			params: `{"type":"object","required":["booking_object_id","check_type","subject","outcome","checked_by"],"additionalProperties":false,"properties":{
"booking_object_id":` + bookingIDSchema + `,"check_type":{"enum":["EQUIPMENT_FIT","MEDICAL_CLEARANCE","AGE_VERIFICATION","SKILL_ASSESSMENT","WEATHER_GO_NOGO"]},
"subject":{"type":"string","minLength":1,"description":"participant_id or itinerary item_id checked"},"outcome":{"enum":["PASS","FAIL","CONDITIONAL","GO","NO_GO"]},
"conditions":{"type":"array","items":{"type":"string"}},"checked_by":{"type":"string","minLength":1},"evidence_ref":{"type":"string"}}}`,
			writes: true, run: s.recordSafetyCheck},
		{name: ToolSearchActivities, action: `ATPAction::"search_activities"`, scope: ScopeBookingRead, risk: registry.RiskLow,
			desc: "Search the activity registry (pre-booking, no booking needed): Capability Declarations with availability, ATP-native and OCTO-bridged.",
			params: `{"type":"object","additionalProperties":false,"properties":{
"query":{"type":"string","description":"words matched against title and description"},"category":{"type":"string"},"location":{"type":"string"},
"date":{"type":"string","format":"date"},"participants":{"type":"integer","minimum":1},"limit":{"type":"integer","minimum":1,"maximum":100}}}`,
			run: s.searchActivities},
		{name: ToolGetBookingStatus, action: `ATPAction::"get_booking_status"`, scope: ScopeContextRead, risk: registry.RiskLow,
			desc:   "Lightweight status of a booking in any state: state, active flags, pending HEM tasks, outstanding pre-arrangements, last event time. Poll it after atp_invoke_hem and after any call that may change the state (Windley re-query).",
			params: `{"type":"object","required":["booking_object_id"],"additionalProperties":false,"properties":{"booking_object_id":` + bookingIDSchema + `}}`,
			run:    s.getBookingStatus},
		s.notifySpec(),
	}
}

type bookingArg struct {
	BookingObjectID string `json:"booking_object_id"`
}

// paymentAllowed is the second check of payment fields: the call's
// mandate must also permit the BOOKING_READ action
// (ATPAction::"search_activities") on this booking. The gate has verified
// the mandate for this call already, so it is only decoded here.
func paymentAllowed(c *worker.Call, b *booking.Booking) (bool, []string) {
	var tok string
	if c.CallCard != nil {
		if raw, ok := c.CallCard.Metadata.Extra[authz.MetadataMandate]; ok {
			_ = json.Unmarshal(raw, &tok)
		}
	}
	if tok == "" {
		return false, nil
	}
	m, err := mandate.Decode(tok)
	if err != nil {
		return false, nil
	}
	action, _ := authz.ParseAction(`ATPAction::"search_activities"`)
	env := authz.EnvFor(c.Command.AgentID, c.ProjectID, action, ToolGetContextPackage, []string{ScopeBookingRead}, atpauthz.Resource(b.ID, b.ToolState(), ""))
	ok, _ := env.Authorize(m.Policies)
	return ok, authz.Grants(m.Policies)
}

// ScopeDenial is the seed's denial body, the detail of an auth_failed
// result for a missing scope claim.
type ScopeDenial struct {
	Error         string   `json:"error"`
	RequiredScope string   `json:"required_scope"`
	MandateScopes []string `json:"mandate_scopes"`
	ATPErrorCode  string   `json:"atp_error_code"`
}

func (s *Service) getContextPackage(ctx context.Context, c *worker.Call) (any, error) {
	var a struct {
		bookingArg
		Fields []string `json:"fields"`
	}
	if err := bind(c, &a); err != nil {
		return nil, err
	}
	b, err := s.store.Get(ctx, c.ProjectID, a.BookingObjectID)
	if err != nil {
		return nil, err
	}
	if err := needPostConfirmation(ToolGetContextPackage, b); err != nil {
		return nil, err
	}
	want := a.Fields
	explicit := len(want) > 0
	if !explicit {
		want = ContextFields
	}
	out := map[string]any{}
	for _, f := range want {
		switch f {
		case "booking_object_id":
			out[f] = b.ID
		case "state":
			out[f] = b.ToolState()
		case "title":
			out[f] = b.Title
		case "itinerary":
			out[f] = b.Itinerary
		case "participants":
			ps := make([]map[string]string, len(b.Participants))
			for i, p := range b.Participants {
				ps[i] = map[string]string{"participant_id": p.ParticipantID, "name": p.Name}
			}
			out[f] = ps
		case "seller_contacts":
			out[f] = b.SellerContacts
		case "meeting_points":
			out[f] = b.MeetingPoints
		case "pre_arrangements":
			out[f] = manifest(b, "ALL")
		case "active_flags":
			out[f] = b.Flags
		case "event_log_summary":
			evs, err := s.store.Events(ctx, c.ProjectID, b.ID, 0, 0, false)
			if err != nil {
				return nil, err
			}
			out[f] = summary(evs)
		case "payment":
			ok, granted := paymentAllowed(c, b)
			switch {
			case ok:
				out[f] = b.Payment
			case explicit:
				return nil, worker.FailDetail(card.CodeAuthFailed,
					"payment fields need the BOOKING_READ scope as well: the mandate must also permit ATPAction::\"search_activities\"; ask for the other fields without \"payment\", or get a mandate that grants BOOKING_READ",
					ScopeDenial{Error: authz.ReasonScopeViolation, RequiredScope: ScopeBookingRead, MandateScopes: nonNil(granted), ATPErrorCode: "MCP-403-SCOPE"})
			default:
				out["withheld_fields"] = []string{"payment"}
			}
		}
	}
	return out, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

type logSummary struct {
	Count      int             `json:"count"`
	ByType     map[string]int  `json:"by_type"`
	LastEvents []booking.Event `json:"last_events"`
}

func summary(evs []booking.Event) logSummary {
	sm := logSummary{Count: len(evs), ByType: map[string]int{}, LastEvents: []booking.Event{}}
	for _, e := range evs {
		sm.ByType[e.Type]++
	}
	if n := len(evs); n > 5 {
		evs = evs[n-5:]
	}
	sm.LastEvents = append(sm.LastEvents, evs...)
	return sm
}

// ManifestItem is one entry of the collection manifest.
type ManifestItem struct {
	ParticipantID  string          `json:"participant_id"`
	FieldKey       string          `json:"field_key"`
	FieldLabel     string          `json:"field_label"`
	FieldType      string          `json:"field_type"`
	Required       bool            `json:"required"`
	CurrentValue   json.RawMessage `json:"current_value"`
	SchemaFragment json.RawMessage `json:"schema_fragment"`
}

func manifest(b *booking.Booking, filter string) []ManifestItem {
	out := []ManifestItem{}
	for _, p := range b.Participants {
		for _, f := range b.Fields {
			v, set := p.PreArrangements[f.Key]
			if (filter == "OUTSTANDING" && set) || (filter == "REQUIRED_OUTSTANDING" && (set || !f.Required)) {
				continue
			}
			if !set {
				v = json.RawMessage("null")
			}
			frag := f.Schema
			if len(frag) == 0 {
				frag = json.RawMessage("true")
			}
			out = append(out, ManifestItem{ParticipantID: p.ParticipantID, FieldKey: f.Key, FieldLabel: f.Label, FieldType: f.Type,
				Required: f.Required, CurrentValue: v, SchemaFragment: frag})
		}
	}
	return out
}

func (s *Service) collectPreArrangement(ctx context.Context, c *worker.Call) (any, error) {
	var a struct {
		bookingArg
		Filter string `json:"filter"`
	}
	if err := bind(c, &a); err != nil {
		return nil, err
	}
	b, err := s.store.Get(ctx, c.ProjectID, a.BookingObjectID)
	if err != nil {
		return nil, err
	}
	if err := needState(ToolCollectPreArr, b, booking.ToolPreJourney); err != nil {
		return nil, err
	}
	return manifest(b, a.Filter), nil
}

// ValidationResult says whether a value satisfied its schema fragment.
type ValidationResult struct {
	Valid  bool     `json:"valid"`
	Errors []string `json:"errors"`
}

func (s *Service) updatePreArrangement(ctx context.Context, c *worker.Call) (any, error) {
	var a struct {
		bookingArg
		ParticipantID string          `json:"participant_id"`
		FieldKey      string          `json:"field_key"`
		FieldValue    json.RawMessage `json:"field_value"`
		Source        string          `json:"source"`
	}
	if err := bind(c, &a); err != nil {
		return nil, err
	}
	var out map[string]any
	setResult(ctx, resultMap(&out))
	_, err := s.store.Update(ctx, c.ProjectID, a.BookingObjectID, func(tx *booking.Tx) error {
		out = nil // the closure may run again
		b := tx.Booking
		if err := needState(ToolUpdatePreArr, b, booking.ToolPreJourney); err != nil {
			return err
		}
		p := b.Participant(a.ParticipantID)
		if p == nil {
			ids := make([]string, len(b.Participants))
			for i, q := range b.Participants {
				ids[i] = q.ParticipantID
			}
			return worker.Fail(card.CodeBadRequest, fmt.Sprintf("booking %s has no participant %q; participants: %s", b.ID, a.ParticipantID, strings.Join(ids, ", ")))
		}
		f := b.Field(a.FieldKey)
		if f == nil {
			keys := make([]string, len(b.Fields))
			for i, g := range b.Fields {
				keys[i] = g.Key
			}
			sort.Strings(keys)
			return worker.Fail(card.CodeBadRequest, fmt.Sprintf("booking %s has no pre-arrangement field %q; fields: %s (atp_collect_pre_arrangement_data lists them)", b.ID, a.FieldKey, strings.Join(keys, ", ")))
		}
		if err := f.ValidateValue(a.FieldValue); err != nil {
			return worker.FailDetail(card.CodeBadRequest, err.Error()+"; the field's schema_fragment says what is accepted",
				map[string]any{"validation_result": ValidationResult{Valid: false, Errors: []string{err.Error()}}, "schema_fragment": f.Schema})
		}
		prev, had := p.PreArrangements[f.Key]
		if !had {
			prev = json.RawMessage("null")
		}
		p.PreArrangements[f.Key] = a.FieldValue
		ev, err := tx.Append(booking.EventPreArrangement, toolkit.Actor(c), map[string]any{"participant_id": p.ParticipantID, "field_key": f.Key,
			"previous_value": prev, "new_value": a.FieldValue, "source": a.Source})
		if err != nil {
			return err
		}
		out = map[string]any{"updated_field": map[string]any{"participant_id": p.ParticipantID, "field_key": f.Key, "value": a.FieldValue},
			"previous_value": prev, "event_log_entry_id": ev.ID, "validation_result": ValidationResult{Valid: true, Errors: []string{}}}
		return nil
	})
	return out, err
}

func (s *Service) recordSafetyCheck(ctx context.Context, c *worker.Call) (any, error) {
	var a struct {
		bookingArg
		CheckType   string   `json:"check_type"`
		Subject     string   `json:"subject"`
		Outcome     string   `json:"outcome"`
		Conditions  []string `json:"conditions"`
		CheckedBy   string   `json:"checked_by"`
		EvidenceRef string   `json:"evidence_ref"`
	}
	if err := bind(c, &a); err != nil {
		return nil, err
	}
	id := callID("sc", c)
	var out map[string]any
	setResult(ctx, resultMap(&out))
	_, err := s.store.Update(ctx, c.ProjectID, a.BookingObjectID, func(tx *booking.Tx) error {
		out = nil // the closure may run again
		b := tx.Booking
		if err := needState(ToolRecordSafetyCheck, b, booking.ToolPreJourney, booking.ToolJourney); err != nil {
			return err
		}
		if b.Participant(a.Subject) == nil && !slices.ContainsFunc(b.Itinerary, func(it booking.Item) bool { return it.ItemID == a.Subject }) {
			return worker.Fail(card.CodeBadRequest, fmt.Sprintf("subject %q is neither a participant_id nor an itinerary item_id of booking %s", a.Subject, b.ID))
		}
		if (a.Outcome == "GO" || a.Outcome == "NO_GO") != (a.CheckType == "WEATHER_GO_NOGO") {
			return worker.Fail(card.CodeBadRequest, "outcome GO and NO_GO belong to check_type WEATHER_GO_NOGO, PASS, FAIL and CONDITIONAL to the other check types")
		}
		st := b.State
		ev, err := tx.Append(booking.EventSafetyCheck, toolkit.Actor(c), map[string]any{"safety_check_id": id, "check_type": a.CheckType, "subject": a.Subject,
			"outcome": a.Outcome, "conditions": nonNil(a.Conditions), "checked_by": a.CheckedBy, "evidence_ref": a.EvidenceRef})
		if err != nil {
			return err
		}
		if b.State != st { // OQ-AS-5: a safety check never moves the booking
			return fmt.Errorf("atp: internal: a safety check changed the state")
		}
		out = map[string]any{"safety_check_id": id, "event_log_entry_id": ev.ID, "booking_object_status_unchanged": true}
		return nil
	})
	return out, err
}

func (s *Service) getBookingStatus(ctx context.Context, c *worker.Call) (any, error) {
	var a bookingArg
	if err := bind(c, &a); err != nil {
		return nil, err
	}
	b, err := s.store.Get(ctx, c.ProjectID, a.BookingObjectID)
	if err != nil {
		return nil, err
	}
	outstanding := 0
	for _, m := range manifest(b, "OUTSTANDING") {
		_ = m
		outstanding++
	}
	tasks, err := s.hemTasks(ctx, c.ProjectID, b.ID)
	if err != nil {
		return nil, err
	}
	out := map[string]any{"booking_object_id": b.ID, "state": b.ToolState(), "layer3_state": b.State, "suspended": b.Suspended,
		"active_flags": b.Flags, "pending_hem_tasks": s.pendingHEM(ctx, c.ProjectID, b), "hem_tasks": tasks,
		"outstanding_pre_arrangements_count": outstanding, "last_event_timestamp": b.LastEventAt}
	if d := b.Deadline(); !d.IsZero() {
		out["state_deadline"] = d
	}
	return out, nil
}

// pendingHEM lists the booking's unresolved HEM tasks (their poll output).
func (s *Service) pendingHEM(ctx context.Context, project string, b *booking.Booking) []any {
	out := []any{}
	for _, id := range b.ActiveHEM {
		if t, err := s.hem.Get(ctx, project, id); err == nil {
			out = append(out, t.PollOutput())
		} else {
			out = append(out, map[string]string{"task_id": id, "status": "PENDING"})
		}
	}
	return out
}

// hemTasks lists every HEM task of the booking, oldest first, as poll
// outputs: how an agent polls an atp_invoke_hem task to its end.
func (s *Service) hemTasks(ctx context.Context, project, bookingID string) ([]any, error) {
	ts, err := s.hem.ForBooking(ctx, project, bookingID)
	if err != nil {
		return nil, err
	}
	out := []any{}
	for _, t := range ts {
		out = append(out, t.PollOutput())
	}
	return out, nil
}
