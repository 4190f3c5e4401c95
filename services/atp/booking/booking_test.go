package booking_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cedar-policy/cedar-go/types"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/services/atp/atpauthz"
	"github.com/utpmesh/utpmesh/services/atp/booking"
)

// clock is an injectable clock tests advance by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func newClock() *clock               { return &clock{t: time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)} }
func open(t *testing.T, path string, c *clock) *booking.Store {
	t.Helper()
	s, err := booking.Open(path, booking.Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func sample() *booking.Booking {
	return &booking.Booking{
		Title:        "Niseko ski week",
		Itinerary:    []booking.Item{{ItemID: "ski-1", Title: "Ski lesson", Start: "2026-05-10T09:00:00Z"}},
		Participants: []booking.Participant{{ParticipantID: "p1", Name: "Aiko", Email: "aiko@example.test"}, {ParticipantID: "p2", Name: "Ben"}},
		Fields: []booking.FieldDef{
			{Key: "boot_size_eu", Label: "Boot size (EU)", Type: "integer", Required: true, Schema: json.RawMessage(`{"type":"integer","minimum":30,"maximum":50}`)},
			{Key: "dietary", Label: "Dietary requirements", Type: "string", Schema: json.RawMessage(`{"type":"string","maxLength":200}`)},
		},
	}
}

// confirmed creates a booking and moves it to CONFIRMED (PRE_JOURNEY).
func confirmed(t *testing.T, s *booking.Store) *booking.Booking {
	t.Helper()
	ctx := context.Background()
	b, err := s.Create(ctx, "demo", sample(), "operator")
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []booking.State{booking.PendingConfirmation, booking.Confirmed} {
		if b, _, err = s.Transition(ctx, "demo", b.ID, to, "operator", "test"); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func TestCreate(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "atp.db"), newClock())
	ctx := context.Background()
	b, err := s.Create(ctx, "demo", sample(), "operator")
	if err != nil {
		t.Fatal(err)
	}
	if b.State != booking.Inquiry || b.ToolState() != "INQUIRY" || len(b.ID) != 36 || b.ID[14] != '7' {
		t.Fatalf("created = %+v", b)
	}
	for _, tc := range []struct {
		name string
		edit func(b *booking.Booking)
		want string
	}{
		{"not a uuidv7", func(b *booking.Booking) { b.ID = "bk-1" }, "not a UUIDv7"},
		{"duplicate participant", func(b *booking.Booking) { b.Participants[1].ParticipantID = "p1" }, `"p1" appears twice`},
		{"bad schema fragment", func(b *booking.Booking) { b.Fields[0].Schema = json.RawMessage(`{"type":12}`) }, "schema_fragment"},
		{"value against fragment", func(b *booking.Booking) {
			b.Participants[0].PreArrangements = map[string]json.RawMessage{"boot_size_eu": json.RawMessage(`12`)}
		}, "boot_size_eu"},
		{"value of unknown field", func(b *booking.Booking) {
			b.Participants[0].PreArrangements = map[string]json.RawMessage{"shoe": json.RawMessage(`1`)}
		}, `"shoe"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := sample()
			tc.edit(in)
			_, err := s.Create(ctx, "demo", in, "operator")
			if !errors.Is(err, booking.ErrBadInput) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrBadInput naming %q", err, tc.want)
			}
		})
	}
	if _, err := s.Get(ctx, "other", b.ID); !errors.Is(err, booking.ErrNotFound) {
		t.Fatalf("other project sees the booking: %v", err)
	}
}

func TestTransitions(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "atp.db"), newClock())
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		path []booking.State // from CONFIRMED
		to   booking.State
		err  error // nil: allowed
		tool string
	}{
		{"start the journey", nil, booking.InJourney, nil, "JOURNEY"},
		{"confirmed to completion skips the journey", nil, booking.Completion, booking.ErrIllegalTransition, ""},
		{"back to inquiry", nil, booking.Inquiry, booking.ErrIllegalTransition, ""},
		{"amendment returns to confirmed", []booking.State{booking.Amendment}, booking.Confirmed, nil, "PRE_JOURNEY"},
		{"amendment may not jump to the journey", []booking.State{booking.Amendment}, booking.InJourney, booking.ErrIllegalTransition, ""},
		{"disruption in journey returns to journey", []booking.State{booking.InJourney, booking.DisruptionReview}, booking.InJourney, nil, "JOURNEY"},
		{"disruption in journey may not return to confirmed", []booking.State{booking.InJourney, booking.DisruptionReview}, booking.Confirmed, booking.ErrIllegalTransition, ""},
		{"nested interruption keeps the origin", []booking.State{booking.InJourney, booking.DisruptionReview, booking.Amendment}, booking.InJourney, nil, "JOURNEY"},
		{"completion is terminal", []booking.State{booking.InJourney, booking.Completion}, booking.InJourney, booking.ErrIllegalTransition, ""},
		{"cancelled is terminal", []booking.State{booking.Cancelled}, booking.Suspended, booking.ErrIllegalTransition, ""},
		{"suspend", nil, booking.Suspended, nil, "BOOKING_SUSPENDED"},
		{"suspended refuses moves", []booking.State{booking.Suspended}, booking.InJourney, booking.ErrSuspended, ""},
		{"resume", []booking.State{booking.Suspended}, booking.Resume, nil, "PRE_JOURNEY"},
		{"cancel while suspended", []booking.State{booking.Suspended}, booking.Cancelled, nil, "BOOKING_CANCELLED_SUSPENDED"},
		{"resume when not suspended", nil, booking.Resume, booking.ErrIllegalTransition, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := confirmed(t, s)
			for _, st := range tc.path {
				if _, _, err := s.Transition(ctx, "demo", b.ID, st, "operator", ""); err != nil {
					t.Fatalf("path %s: %v", st, err)
				}
			}
			before, _ := s.Get(ctx, "demo", b.ID)
			got, ev, err := s.Transition(ctx, "demo", b.ID, tc.to, "operator", "because")
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				after, _ := s.Get(ctx, "demo", b.ID)
				if after.State != before.State || after.EventCount != before.EventCount {
					t.Fatalf("a refused transition changed the booking: %+v", after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ToolState() != tc.tool || ev.Type != booking.EventTransition || !strings.Contains(string(ev.Data), `"reason":"because"`) {
				t.Fatalf("booking %s, event %+v", got.ToolState(), ev)
			}
		})
	}
}

func TestHEMBlocksTransitions(t *testing.T) {
	c := newClock()
	s := open(t, filepath.Join(t.TempDir(), "atp.db"), c)
	ctx := context.Background()
	b := confirmed(t, s)
	if _, _, err := s.Transition(ctx, "demo", b.ID, booking.DisruptionReview, "operator", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, "demo", b.ID, func(tx *booking.Tx) error { tx.AddHEM("task-1"); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Transition(ctx, "demo", b.ID, booking.Confirmed, "operator", ""); !errors.Is(err, booking.ErrHEMActive) || !strings.Contains(err.Error(), "task-1") {
		t.Fatalf("err = %v, want ErrHEMActive naming the task", err)
	}
	c.Add(2 * time.Hour) // past DISRUPTION_REVIEW's PT1H: no clock runs during the escalation
	if fired, err := s.Tick(ctx); err != nil || len(fired) != 0 {
		t.Fatalf("tick during HEM = %v, %v", fired, err)
	}
	if _, err := s.Update(ctx, "demo", b.ID, func(tx *booking.Tx) error { tx.RemoveHEM("task-1"); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Transition(ctx, "demo", b.ID, booking.Confirmed, "operator", ""); err != nil {
		t.Fatal(err)
	}
}

func TestTimeouts(t *testing.T) {
	c := newClock()
	path := filepath.Join(t.TempDir(), "atp.db")
	s := open(t, path, c)
	ctx := context.Background()
	pending, err := s.Create(ctx, "demo", sample(), "operator")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Transition(ctx, "demo", pending.ID, booking.PendingConfirmation, "operator", ""); err != nil {
		t.Fatal(err)
	}
	journey := confirmed(t, s)
	for _, st := range []booking.State{booking.InJourney, booking.DisruptionReview} {
		if _, _, err := s.Transition(ctx, "demo", journey.ID, st, "operator", ""); err != nil {
			t.Fatal(err)
		}
	}
	amend := confirmed(t, s)
	if _, _, err := s.Transition(ctx, "demo", amend.ID, booking.Amendment, "operator", ""); err != nil {
		t.Fatal(err)
	}
	suspended := confirmed(t, s)
	for _, st := range []booking.State{booking.Amendment, booking.Suspended} {
		if _, _, err := s.Transition(ctx, "demo", suspended.ID, st, "operator", ""); err != nil {
			t.Fatal(err)
		}
	}

	steps := []struct {
		advance time.Duration
		want    map[string]string // booking id -> tool state after the tick
	}{
		{59 * time.Minute, map[string]string{pending.ID: "PENDING_CONFIRMATION", journey.ID: "DISRUPTION_REVIEW", amend.ID: "AMENDMENT"}},
		{time.Minute, map[string]string{journey.ID: "PARTY_UNRESPONSIVE"}},
		{23 * time.Hour, map[string]string{amend.ID: "PRE_JOURNEY", journey.ID: "PARTY_UNRESPONSIVE"}},
		{time.Hour, map[string]string{journey.ID: "BOOKING_CANCELLED", pending.ID: "PENDING_CONFIRMATION"}},
		{24 * time.Hour, map[string]string{pending.ID: "BOOKING_CANCELLED", suspended.ID: "BOOKING_SUSPENDED"}},
	}
	for i, st := range steps {
		c.Add(st.advance)
		if _, err := s.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		if i == 2 { // a restart between ticks keeps state and clocks
			_ = s.Close()
			s = open(t, path, c)
		}
		for id, want := range st.want {
			b, err := s.Get(ctx, "demo", id)
			if err != nil {
				t.Fatal(err)
			}
			if b.ToolState() != want {
				t.Fatalf("step %d: booking %s is %s, want %s", i, id, b.ToolState(), want)
			}
		}
	}
	evs, err := s.Events(ctx, "demo", journey.ID, 0, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Type != booking.EventTimeout || last.Actor != "atp.timeout" || !strings.Contains(string(last.Data), `"to":"BOOKING_CANCELLED"`) {
		t.Fatalf("last event = %+v", last)
	}
}

func TestEventLog(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "atp.db"), newClock())
	ctx := context.Background()
	b := confirmed(t, s)
	if _, err := s.Update(ctx, "demo", b.ID, func(tx *booking.Tx) error {
		_, err := tx.Append(booking.EventGuardrail, "rail2", map[string]string{"blocked": "x"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// A failing change appends nothing.
	if _, err := s.Update(ctx, "demo", b.ID, func(tx *booking.Tx) error {
		if _, err := tx.Append(booking.EventNotification, "x", nil); err != nil {
			return err
		}
		return errors.New("boom")
	}); err == nil {
		t.Fatal("want error")
	}
	all, err := s.Events(ctx, "demo", b.ID, 0, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for i, e := range all {
		types = append(types, e.Type)
		if e.Seq != uint64(i+1) || e.ID != b.ID+"/"+itoa(i+1) {
			t.Fatalf("event %d = %+v", i, e)
		}
	}
	if strings.Join(types, ",") != "BOOKING_CREATED,STATE_TRANSITION,STATE_TRANSITION,GUARDRAIL" {
		t.Fatalf("types = %v", types)
	}
	public, _ := s.Events(ctx, "demo", b.ID, 0, 0, false)
	if len(public) != 3 {
		t.Fatalf("non-operators see %d events, want 3 (guardrail events are operator-only)", len(public))
	}
	page, _ := s.Events(ctx, "demo", b.ID, 1, 1, true)
	if len(page) != 1 || page[0].Seq != 2 {
		t.Fatalf("page = %+v", page)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestGateSeesBookingState: a project policy that permits a tool only in
// PRE_JOURNEY, evaluated by the real Cedar gate with the store as its
// atpauthz.States and a real mandate.
func TestGateSeesBookingState(t *testing.T) {
	atpauthz.Register() // as the mesh assembly does
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, filepath.Join(dir, "atp.db"), newClock())
	b := confirmed(t, s)
	policies := authz.NewMemoryStore()
	if _, err := policies.PutPolicies(ctx, "demo", `permit(principal, action == ATPAction::"update_pre_arrangement", resource in Project::"demo")
when { context.booking_state == "PRE_JOURNEY" };`); err != nil {
		t.Fatal(err)
	}
	keys := mandate.NewKeyDir(filepath.Join(dir, "keys"))
	key, _, err := keys.Ensure(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := mandate.Issue(key, mandate.Claims{Subject: "a1", ExpiresAt: time.Now().Add(time.Hour).Unix(),
		Mandate: mandate.Grant{PolicySet: `permit(principal, action == ATPAction::"update_pre_arrangement", resource);`}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	gate, err := authz.NewGate(authz.GateConfig{Policies: policies, Keys: keys, Resources: []authz.ResourceResolver{atpauthz.New(s)}})
	if err != nil {
		t.Fatal(err)
	}
	decide := func() *authz.Decision {
		t.Helper()
		d, err := gate.Decide(ctx, &authz.Request{Project: "demo", AgentID: "a1", ToolName: "atp_update_pre_arrangement",
			Action: types.NewEntityUID("ATPAction", "update_pre_arrangement"), Mandate: tok,
			Arguments: json.RawMessage(`{"booking_object_id":"` + b.ID + `"}`)})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := decide(); !d.Allowed || d.ResourceState != "PRE_JOURNEY" {
		t.Fatalf("in PRE_JOURNEY: %+v", d)
	}
	if _, _, err := s.Transition(ctx, "demo", b.ID, booking.InJourney, "operator", ""); err != nil {
		t.Fatal(err)
	}
	if d := decide(); d.Allowed || d.ResourceState != "JOURNEY" || d.Reason != authz.ReasonProjectPolicy {
		t.Fatalf("in JOURNEY: %+v", d)
	}
	if st, err := s.BookingState(ctx, "demo", booking.NewID()); err != nil || st != "" {
		t.Fatalf("unknown booking: %q, %v", st, err)
	}
}

func TestParseState(t *testing.T) {
	for in, want := range map[string]booking.State{"pre_journey": booking.Confirmed, "JOURNEY": booking.InJourney, "resume": booking.Resume, "AMENDMENT": booking.Amendment} {
		if got, err := booking.ParseState(in); err != nil || got != want {
			t.Errorf("%s = %s, %v", in, got, err)
		}
	}
	if _, err := booking.ParseState("DONE"); err == nil || !strings.Contains(err.Error(), "PRE_JOURNEY") {
		t.Fatalf("err = %v", err)
	}
}
