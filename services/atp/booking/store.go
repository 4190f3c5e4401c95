package booking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/utpmesh/utpmesh/services/atp/atpauthz"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/boltstate"
)

// Event types of the log.
const (
	EventCreated        = "BOOKING_CREATED"
	EventTransition     = "STATE_TRANSITION"
	EventTimeout        = "STATE_TIMEOUT"
	EventNotification   = "NOTIFICATION"
	EventPreArrangement = "PRE_ARRANGEMENT_UPDATE"
	EventSafetyCheck    = "SAFETY_CHECK"
	EventHEMInvoked     = "HEM_INVOKED"
	EventHEMResolved    = "HEM_RESOLVED"
	EventGuardrail      = "GUARDRAIL"
)

// Event is one immutable entry of a booking's log.
type Event struct {
	// Seq counts the booking's events from 1.
	Seq uint64 `json:"seq"`
	// ID is "<booking id>/<seq>", the event_log_entry_id tools return.
	ID    string          `json:"event_log_entry_id"`
	Time  time.Time       `json:"time"`
	Type  string          `json:"type"`
	Actor string          `json:"actor"`
	Data  json.RawMessage `json:"data,omitempty"`
	// OperatorOnly events (guardrail events) are shown to operator roles
	// only.
	OperatorOnly bool `json:"operator_only,omitempty"`
}

// Options configure a Store.
type Options struct {
	// Now is the clock (timeouts, event times); default time.Now.
	Now func() time.Time
	// Committed, when set, is called after each committed Update with
	// the events it appended (the ATP service publishes the state
	// transitions among them as state events). It runs after the commit,
	// never inside the transaction, and cannot undo it.
	Committed func(ctx context.Context, project, bookingID string, events []Event)
}

// Buckets of a project in the state engine (package state).
const (
	// BucketBookings holds each booking's object under its id.
	BucketBookings = "bookings"
	// eventsPrefix + <booking id> is a booking's log, keyed by
	// EventKey(seq).
	eventsPrefix = "events/"
)

// EventsBucket is the bucket of a booking's log.
func EventsBucket(id string) string { return eventsPrefix + id }

// EventKey is the key of a log entry: its sequence number as 16 hex
// digits, so keys sort in log order.
func EventKey(seq uint64) string { return fmt.Sprintf("%016x", seq) }

// Store keeps bookings and their logs in the state engine (package
// state): a JetStream KV bucket every worker of the service shares
// (kvstate), or a local bbolt file (boltstate, Open). It is safe for
// concurrent use and implements atpauthz.States.
type Store struct {
	st        state.Store
	now       func() time.Time
	committed func(ctx context.Context, project, bookingID string, events []Event)
}

var _ atpauthz.States = (*Store)(nil)

// New keeps the bookings in st. Closing the Store closes st.
func New(st state.Store, opts Options) *Store {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Store{st: recording{st}, now: opts.Now, committed: opts.Committed}
}

// Open keeps the bookings in the local bbolt file at path (boltstate;
// one process may open it).
func Open(path string, opts Options) (*Store, error) {
	st, err := boltstate.Open(path, 0)
	if err != nil {
		return nil, fmt.Errorf("booking: %w (is another ATP process using this data directory?)", err)
	}
	return New(st, opts), nil
}

// Close closes the state.
func (s *Store) Close() error { return s.st.Close() }

// State is the state engine the bookings live in, for packages of the ATP
// service that keep their own buckets beside them (HEM tasks,
// notifications, activities).
func (s *Store) State() state.Store { return s.st }

// Now is the store's clock.
func (s *Store) Now() time.Time { return s.now().UTC() }

// Tx is one change of one booking: Booking may be modified, Append adds
// events; both are committed together by Update. Its function may run
// more than once (state.Store.Update): it must have no other effect.
type Tx struct {
	Booking *Booking
	tx      state.Tx
	project string
	now     time.Time
	added   []Event
}

// State is the underlying transaction (for buckets of other packages).
func (t *Tx) State() state.Tx { return t.tx }

// Now is the transaction's time.
func (t *Tx) Now() time.Time { return t.now }

// Append adds an event to the booking's log and returns it.
func (t *Tx) Append(typ, actor string, data any) (Event, error) {
	var raw json.RawMessage
	if data != nil {
		var err error
		if raw, err = json.Marshal(data); err != nil {
			return Event{}, fmt.Errorf("booking: encode %s event: %w", typ, err)
		}
	}
	seq := t.Booking.EventCount + 1
	e := Event{Seq: seq, ID: fmt.Sprintf("%s/%d", t.Booking.ID, seq), Time: t.now, Type: typ, Actor: actor, Data: raw,
		OperatorOnly: typ == EventGuardrail}
	enc, err := json.Marshal(e)
	if err != nil {
		return Event{}, err
	}
	if err := t.tx.Bucket(t.project, EventsBucket(t.Booking.ID)).Put(EventKey(seq), enc); err != nil {
		return Event{}, err
	}
	t.Booking.LastEventAt, t.Booking.EventCount = t.now, seq
	t.added = append(t.added, e)
	return e, nil
}

// Events returns the booking's log, the events appended in this change
// included (operator-only entries too).
func (t *Tx) Events() ([]Event, error) {
	return scanEvents(t.tx, t.project, t.Booking.ID, 0, 0, true)
}

func scanEvents(tx state.Tx, project, id string, after uint64, limit int, operator bool) ([]Event, error) {
	out := []Event{}
	err := tx.Bucket(project, EventsBucket(id)).Scan("", false, func(_ string, v []byte) error {
		var e Event
		if err := json.Unmarshal(v, &e); err != nil {
			return fmt.Errorf("booking: decode an event of %s: %w", id, err)
		}
		if e.Seq <= after || (e.OperatorOnly && !operator) {
			return nil
		}
		out = append(out, e)
		if limit > 0 && len(out) >= limit {
			return state.ErrStop
		}
		return nil
	})
	return out, err
}

func (s *Store) err(err error) error {
	if errors.Is(err, state.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// Create stores a new booking in INQUIRY (the only state creation enters)
// with its BOOKING_CREATED event. An empty ID gets a UUIDv7.
func (s *Store) Create(ctx context.Context, project string, b *Booking, actor string) (*Booking, error) {
	return s.CreateAdvanced(ctx, project, b, actor, "", nil)
}

// CreateAdvanced is Create followed, in the same transaction, by the
// transitions to each state of path, each logged with reason: the booking
// is stored with all of them or not at all.
func (s *Store) CreateAdvanced(ctx context.Context, project string, b *Booking, actor, reason string, path []State) (*Booking, error) {
	if project == "" {
		return nil, fmt.Errorf("%w: no project", ErrBadInput)
	}
	nb := *b
	if err := nb.check(); err != nil {
		return nil, err
	}
	now := s.Now()
	nb.Project, nb.State, nb.Suspended, nb.ReturnState = project, Inquiry, false, ""
	nb.StateEnteredAt, nb.CreatedAt, nb.UpdatedAt = now, now, now
	nb.EventCount, nb.LastEventAt = 0, time.Time{}
	var out Booking
	err := s.st.Update(ctx, func(tx state.Tx) error {
		if _, found, err := tx.Bucket(project, BucketBookings).Get(nb.ID); err != nil {
			return err
		} else if found {
			return fmt.Errorf("%w: booking %s already exists in project %s", ErrBadInput, nb.ID, project)
		}
		out = nb // a closure run again starts from the request
		t := &Tx{Booking: &out, tx: tx, project: project, now: now}
		if _, err := t.Append(EventCreated, actor, map[string]any{"state": Inquiry}); err != nil {
			return err
		}
		for _, st := range path {
			if _, err := t.Transition(st, actor, reason); err != nil {
				return err
			}
		}
		return putBooking(tx, &out)
	})
	if err != nil {
		return nil, s.err(err)
	}
	return &out, nil
}

func putBooking(tx state.Tx, b *Booking) error {
	raw, err := json.Marshal(b)
	if err != nil {
		return err
	}
	return tx.Bucket(b.Project, BucketBookings).Put(b.ID, raw)
}

func getBooking(tx state.Tx, project, id string) (*Booking, error) {
	raw, found, err := tx.Bucket(project, BucketBookings).Get(id)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%w: no booking %q in project %s (utpmesh atp booking create makes one)", ErrNotFound, id, project)
	}
	b := &Booking{}
	if err := json.Unmarshal(raw, b); err != nil {
		return nil, fmt.Errorf("booking: decode %s: %w", id, err)
	}
	return b, nil
}

// Get returns a booking.
func (s *Store) Get(ctx context.Context, project, id string) (*Booking, error) {
	var b *Booking
	err := s.st.View(ctx, func(tx state.Tx) error {
		var err error
		b, err = getBooking(tx, project, id)
		return err
	})
	return b, s.err(err)
}

// List returns the project's bookings, by id.
func (s *Store) List(ctx context.Context, project string) ([]*Booking, error) {
	var out []*Booking
	err := s.st.View(ctx, func(tx state.Tx) error {
		out = nil
		return tx.Bucket(project, BucketBookings).Scan("", false, func(id string, raw []byte) error {
			b := &Booking{}
			if err := json.Unmarshal(raw, b); err != nil {
				return fmt.Errorf("booking: decode %s: %w", id, err)
			}
			out = append(out, b)
			return nil
		})
	})
	return out, s.err(err)
}

// BookingState implements atpauthz.States: the booking's ToolState,
// or "" when the project has no such booking (policies that test the
// state then deny, and the tool itself says the booking is unknown).
func (s *Store) BookingState(ctx context.Context, project, id string) (string, error) {
	b, err := s.Get(ctx, project, id)
	if errors.Is(err, ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return b.ToolState(), nil
}

// Update runs fn on one booking in one write transaction: the booking as
// fn leaves it and the events it appended are stored together, or nothing
// is when fn fails. It returns the events appended. fn may run more than
// once (another worker's conflicting commit re-runs it with fresh reads).
func (s *Store) Update(ctx context.Context, project, id string, fn func(t *Tx) error) ([]Event, error) {
	var added []Event
	err := s.st.Update(ctx, func(tx state.Tx) error {
		b, err := getBooking(tx, project, id)
		if err != nil {
			return err
		}
		t := &Tx{Booking: b, tx: tx, project: project, now: s.Now()}
		if err := fn(t); err != nil {
			return err
		}
		b.UpdatedAt = t.now
		added = t.added
		return putBooking(tx, b)
	})
	if err == nil && len(added) > 0 && s.committed != nil {
		s.committed(ctx, project, id, added)
	}
	return added, s.err(err)
}

// View runs fn on one booking in a read transaction.
func (s *Store) View(ctx context.Context, project, id string, fn func(b *Booking, tx state.Tx) error) error {
	return s.err(s.st.View(ctx, func(tx state.Tx) error {
		b, err := getBooking(tx, project, id)
		if err != nil {
			return err
		}
		return fn(b, tx)
	}))
}

// Transition moves the booking (see Store.Transition) inside this change.
func (t *Tx) Transition(to State, actor, reason string) (Event, error) {
	return transition(t, to, actor, reason, EventTransition)
}

// Transition moves a booking to a state (a Layer-3 state, Suspended or
// Resume) and logs a STATE_TRANSITION event. It refuses a transition the
// table does not list (ErrIllegalTransition), any transition while a HEM
// escalation is active (ErrHEMActive), and any but Resume and cancellation
// while the booking is suspended (ErrSuspended).
func (s *Store) Transition(ctx context.Context, project, id string, to State, actor, reason string) (*Booking, Event, error) {
	var out *Booking
	var ev Event
	_, err := s.Update(ctx, project, id, func(t *Tx) error {
		var err error
		ev, err = transition(t, to, actor, reason, EventTransition)
		out = t.Booking
		return err
	})
	if err != nil {
		return nil, Event{}, err
	}
	return out, ev, nil
}

type transitionData struct {
	From      string `json:"from"`
	To        string `json:"to"`
	FromTool  string `json:"from_tool_state"`
	ToTool    string `json:"to_tool_state"`
	Suspended bool   `json:"suspended"`
	Reason    string `json:"reason,omitempty"`
}

func transition(t *Tx, to State, actor, reason, evType string) (Event, error) {
	b := t.Booking
	if len(b.ActiveHEM) > 0 {
		return Event{}, fmt.Errorf("%w: booking %s has HEM escalation %s pending; resolve it first (utpmesh hem confirm|decline)", ErrHEMActive, b.ID, b.ActiveHEM[0])
	}
	fromTool, from := b.ToolState(), b.State
	switch {
	case to == Suspended:
		if b.Suspended {
			return Event{}, fmt.Errorf("%w: booking %s is already suspended", ErrIllegalTransition, b.ID)
		}
		if b.State.Terminal() {
			return Event{}, fmt.Errorf("%w: booking %s is %s, a terminal state; it cannot be suspended", ErrIllegalTransition, b.ID, b.State)
		}
		b.Suspended = true
	case to == Resume:
		if !b.Suspended {
			return Event{}, fmt.Errorf("%w: booking %s is not suspended; nothing to resume", ErrIllegalTransition, b.ID)
		}
		b.Suspended = false
		b.StateEnteredAt = t.now // the clock restarts: no clock ran while suspended
	case b.Suspended:
		if to != Cancelled {
			return Event{}, fmt.Errorf("%w: booking %s is suspended (underlying %s); only %s or %s may follow", ErrSuspended, b.ID, b.State, Resume, Cancelled)
		}
		b.State, b.Suspended, b.ReturnState, b.StateEnteredAt = CancelledSuspended, false, "", t.now
	default:
		if err := checkTransition(b, to); err != nil {
			return Event{}, err
		}
		switch {
		case slices.Contains(Returns, to) && !slices.Contains(Returns, from):
			b.ReturnState = from
		case !slices.Contains(Returns, to):
			b.ReturnState = ""
		}
		b.State, b.StateEnteredAt = to, t.now
	}
	return t.Append(evType, actor, transitionData{From: string(from), To: string(b.State), FromTool: fromTool, ToTool: b.ToolState(),
		Suspended: b.Suspended, Reason: reason})
}

// Events returns a booking's log entries with Seq > after, at most limit
// (0: all). Operator-only entries are left out unless operator is set.
func (s *Store) Events(ctx context.Context, project, id string, after uint64, limit int, operator bool) ([]Event, error) {
	var out []Event
	err := s.st.View(ctx, func(tx state.Tx) error {
		if _, err := getBooking(tx, project, id); err != nil {
			return err
		}
		var err error
		out, err = scanEvents(tx, project, id, after, limit, operator)
		return err
	})
	return out, s.err(err)
}

// Fired is a timeout Tick applied.
type Fired struct {
	Project   string `json:"project"`
	BookingID string `json:"booking_object_id"`
	From      State  `json:"from"`
	To        State  `json:"to"`
}

// Tick applies every state timeout that has passed by the store's clock,
// each as a STATE_TIMEOUT event by actor "atp.timeout". A suspended
// booking, or one with an active HEM escalation, runs no clock.
func (s *Store) Tick(ctx context.Context) ([]Fired, error) {
	now := s.Now()
	type due struct{ project, id string }
	var dues []due
	err := s.st.View(ctx, func(tx state.Tx) error {
		dues = nil
		projects, err := tx.Projects()
		if err != nil {
			return err
		}
		for _, project := range projects {
			err := tx.Bucket(project, BucketBookings).Scan("", false, func(id string, raw []byte) error {
				b := &Booking{}
				if err := json.Unmarshal(raw, b); err != nil {
					return fmt.Errorf("booking: decode %s: %w", id, err)
				}
				if _, ok := timeoutDue(b, now); ok {
					dues = append(dues, due{project, b.ID})
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, s.err(err)
	}
	var fired []Fired
	for _, d := range dues {
		if ctx.Err() != nil {
			return fired, ctx.Err()
		}
		var f *Fired
		_, err := s.Update(ctx, d.project, d.id, func(t *Tx) error {
			f = nil
			to, ok := timeoutDue(t.Booking, t.now)
			if !ok { // changed since the scan
				return nil
			}
			from := t.Booking.State
			tm := Timeouts[from]
			if _, err := transition(t, to, "atp.timeout", fmt.Sprintf("%s timed out after %s", from, tm.After), EventTimeout); err != nil {
				return err
			}
			f = &Fired{Project: d.project, BookingID: d.id, From: from, To: t.Booking.State}
			return nil
		})
		if err != nil {
			return fired, err
		}
		if f != nil {
			fired = append(fired, *f)
		}
	}
	return fired, nil
}

// timeoutDue returns the state a booking's passed timeout moves it to.
func timeoutDue(b *Booking, now time.Time) (State, bool) {
	tm, ok := Timeouts[b.State]
	if !ok || b.Suspended || len(b.ActiveHEM) > 0 || now.Before(b.StateEnteredAt.Add(tm.After)) {
		return "", false
	}
	if tm.Return {
		return b.ReturnState, b.ReturnState != ""
	}
	return tm.To, true
}

// Deadline is when the booking's current state times out, or zero.
func (b *Booking) Deadline() time.Time {
	tm, ok := Timeouts[b.State]
	if !ok || b.Suspended {
		return time.Time{}
	}
	return b.StateEnteredAt.Add(tm.After)
}

// AddHEM marks a HEM escalation active on the booking (no transition until
// RemoveHEM).
func (t *Tx) AddHEM(taskID string) {
	if !slices.Contains(t.Booking.ActiveHEM, taskID) {
		t.Booking.ActiveHEM = append(t.Booking.ActiveHEM, taskID)
	}
}

// RemoveHEM marks a HEM escalation resolved.
func (t *Tx) RemoveHEM(taskID string) {
	t.Booking.ActiveHEM = slices.DeleteFunc(t.Booking.ActiveHEM, func(s string) bool { return s == taskID })
}
