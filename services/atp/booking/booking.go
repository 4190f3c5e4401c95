package booking

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/utpmesh/utpmesh/pkg/registry"
)

// Errors of the package; every error returned wraps one of them.
var (
	// ErrNotFound: no booking of that id in the project.
	ErrNotFound = errors.New("booking: not found")
	// ErrIllegalTransition: the state machine does not allow the move.
	ErrIllegalTransition = errors.New("booking: illegal transition")
	// ErrHEMActive: a HEM escalation is active on the booking; no state
	// transition until it resolves.
	ErrHEMActive = errors.New("booking: HEM escalation active")
	// ErrSuspended: the booking is suspended (BOOKING_SUSPENDED overlay).
	ErrSuspended = errors.New("booking: suspended")
	// ErrBadInput: a booking, field or value is malformed.
	ErrBadInput = errors.New("booking: bad input")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("booking: store closed")
	// ErrRecorded: a write transaction of a call (WithRecord) found the
	// call's record stored already: its change was applied before; answer
	// from Store.Recorded.
	ErrRecorded = errors.New("booking: the call's change is recorded already")
)

// Booking is one Booking Object.
type Booking struct {
	ID      string `json:"booking_object_id"`
	Project string `json:"project"`
	// State is the Layer-3 state; Suspended is the overlay.
	State     State `json:"state"`
	Suspended bool  `json:"suspended"`
	// ReturnState is the state an interrupting state (AMENDMENT,
	// DISRUPTION_REVIEW, PARTY_UNRESPONSIVE) interrupted.
	ReturnState    State     `json:"return_state,omitempty"`
	StateEnteredAt time.Time `json:"state_entered_at"`
	// Title names the booking for operators.
	Title          string          `json:"title,omitempty"`
	Itinerary      []Item          `json:"itinerary"`
	Participants   []Participant   `json:"participants"`
	SellerContacts []Contact       `json:"seller_contacts"`
	MeetingPoints  []MeetingPoint  `json:"meeting_points"`
	Fields         []FieldDef      `json:"pre_arrangement_fields"`
	Payment        json.RawMessage `json:"payment,omitempty"`
	Flags          []string        `json:"active_flags"`
	// ActiveHEM are the task ids of HEM escalations not yet resolved.
	ActiveHEM   []string  `json:"active_hem_tasks"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	LastEventAt time.Time `json:"last_event_at"`
	EventCount  uint64    `json:"event_count"`
}

// ToolState is the state the tool catalogue and the Cedar gate see:
// BOOKING_SUSPENDED while suspended, else State.ToolName().
func (b *Booking) ToolState() string {
	if b.Suspended {
		return string(Suspended)
	}
	return b.State.ToolName()
}

// Item is one itinerary entry.
type Item struct {
	ItemID     string `json:"item_id"`
	ActivityID string `json:"activity_id,omitempty"`
	Title      string `json:"title"`
	Start      string `json:"start,omitempty"`
	End        string `json:"end,omitempty"`
	Location   string `json:"location,omitempty"`
	SupplierID string `json:"supplier_id,omitempty"`
}

// Participant is one traveller; PreArrangements holds the values of the
// pre-arrangement fields (FieldDef.Key) set so far.
type Participant struct {
	ParticipantID   string                     `json:"participant_id"`
	Name            string                     `json:"name"`
	Email           string                     `json:"email,omitempty"`
	Phone           string                     `json:"phone,omitempty"`
	WhatsApp        string                     `json:"whatsapp,omitempty"`
	PreArrangements map[string]json.RawMessage `json:"pre_arrangements"`
}

// Contact is a seller (supplier) contact.
type Contact struct {
	Name  string `json:"name"`
	Role  string `json:"role,omitempty"`
	Email string `json:"email,omitempty"`
	Phone string `json:"phone,omitempty"`
}

// MeetingPoint is where participants meet for an itinerary item.
type MeetingPoint struct {
	ItemID      string  `json:"item_id,omitempty"`
	Name        string  `json:"name"`
	Address     string  `json:"address,omitempty"`
	Lat         float64 `json:"lat,omitempty"`
	Lon         float64 `json:"lon,omitempty"`
	Time        string  `json:"time,omitempty"`
	Instruction string  `json:"instructions,omitempty"`
}

// FieldDef is a pre-arrangement field of the booking's activities: an
// Activity Configuration Schema fragment (Schema, a JSON Schema the value
// must satisfy).
type FieldDef struct {
	Key      string          `json:"field_key"`
	Label    string          `json:"field_label"`
	Type     string          `json:"field_type"`
	Required bool            `json:"required"`
	Schema   json.RawMessage `json:"schema_fragment"`
}

// Participant returns the participant of an id, or nil.
func (b *Booking) Participant(id string) *Participant {
	for i := range b.Participants {
		if b.Participants[i].ParticipantID == id {
			return &b.Participants[i]
		}
	}
	return nil
}

// Field returns the field definition of a key, or nil.
func (b *Booking) Field(key string) *FieldDef {
	for i := range b.Fields {
		if b.Fields[i].Key == key {
			return &b.Fields[i]
		}
	}
	return nil
}

// HasFlag reports whether flag is active.
func (b *Booking) HasFlag(flag string) bool {
	for _, f := range b.Flags {
		if f == flag {
			return true
		}
	}
	return false
}

// NewID returns a UUIDv7 booking id.
func NewID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// ValidateValue checks a pre-arrangement value against the field's schema
// fragment. The error wraps ErrBadInput and names the field and the rule.
func (f *FieldDef) ValidateValue(value json.RawMessage) error {
	s, err := f.compile()
	if err != nil {
		return err
	}
	doc, _ := json.Marshal(map[string]json.RawMessage{"value": value})
	if err := s.Validate(doc); err != nil {
		return fmt.Errorf("%w: field %s: %v", ErrBadInput, f.Key, trimArgs(err))
	}
	return nil
}

func (f *FieldDef) compile() (*registry.Schema, error) {
	frag := f.Schema
	if len(frag) == 0 {
		frag = json.RawMessage(`true`)
	}
	wrapped := fmt.Sprintf(`{"type":"object","properties":{"value":%s},"required":["value"]}`, frag)
	s, err := registry.CompileSchema(json.RawMessage(wrapped))
	if err != nil {
		return nil, fmt.Errorf("%w: field %s: schema_fragment: %v", ErrBadInput, f.Key, err)
	}
	return s, nil
}

// trimArgs rewrites the registry's "arguments/value" paths to "value".
func trimArgs(err error) string {
	msg := err.Error()
	for _, p := range []string{registry.ErrArgs.Error() + ": ", "arguments/"} {
		if i := strings.Index(msg, p); i >= 0 {
			msg = msg[:i] + msg[i+len(p):]
		}
	}
	return msg
}

// check validates a new booking and fills its defaults.
func (b *Booking) check() error {
	if b.ID == "" {
		b.ID = NewID()
	} else if u, err := uuid.Parse(b.ID); err != nil || u.Version() != 7 {
		return fmt.Errorf("%w: booking_object_id %q is not a UUIDv7; leave it empty to have one made", ErrBadInput, b.ID)
	}
	seen := map[string]bool{}
	for i := range b.Participants {
		p := &b.Participants[i]
		if p.ParticipantID == "" {
			return fmt.Errorf("%w: participants[%d] has no participant_id", ErrBadInput, i)
		}
		if seen[p.ParticipantID] {
			return fmt.Errorf("%w: participant_id %q appears twice", ErrBadInput, p.ParticipantID)
		}
		seen[p.ParticipantID] = true
		if p.PreArrangements == nil {
			p.PreArrangements = map[string]json.RawMessage{}
		}
	}
	keys := map[string]bool{}
	for i := range b.Fields {
		f := &b.Fields[i]
		if f.Key == "" {
			return fmt.Errorf("%w: pre_arrangement_fields[%d] has no field_key", ErrBadInput, i)
		}
		if keys[f.Key] {
			return fmt.Errorf("%w: field_key %q appears twice", ErrBadInput, f.Key)
		}
		keys[f.Key] = true
		if _, err := f.compile(); err != nil {
			return err
		}
	}
	for _, p := range b.Participants {
		for k, v := range p.PreArrangements {
			f := b.Field(k)
			if f == nil {
				return fmt.Errorf("%w: participant %s has a value for %q, which is no pre_arrangement_fields key", ErrBadInput, p.ParticipantID, k)
			}
			if err := f.ValidateValue(v); err != nil {
				return err
			}
		}
	}
	if b.Itinerary == nil {
		b.Itinerary = []Item{}
	}
	if b.Participants == nil {
		b.Participants = []Participant{}
	}
	if b.SellerContacts == nil {
		b.SellerContacts = []Contact{}
	}
	if b.MeetingPoints == nil {
		b.MeetingPoints = []MeetingPoint{}
	}
	if b.Fields == nil {
		b.Fields = []FieldDef{}
	}
	if b.Flags == nil {
		b.Flags = []string{}
	}
	b.ActiveHEM = []string{}
	return nil
}
