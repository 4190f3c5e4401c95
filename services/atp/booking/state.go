package booking

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// State is a Layer-3 booking state.
type State string

// The Layer-3 states.
const (
	Inquiry             State = "INQUIRY"
	PendingConfirmation State = "PENDING_CONFIRMATION"
	Confirmed           State = "CONFIRMED"
	Amendment           State = "AMENDMENT"
	DisruptionReview    State = "DISRUPTION_REVIEW"
	PartyUnresponsive   State = "PARTY_UNRESPONSIVE"
	InJourney           State = "IN_JOURNEY"
	Completion          State = "COMPLETION"
	Cancelled           State = "BOOKING_CANCELLED"
	CancelledSuspended  State = "BOOKING_CANCELLED_SUSPENDED"
	// Suspended is the overlay: as a transition target it suspends the
	// booking (Booking.Suspended), keeping its underlying state.
	Suspended State = "BOOKING_SUSPENDED"
	// Resume is the pseudo-target that lifts the overlay.
	Resume State = "RESUME"
)

// Tool-catalogue state names (ToolState) that differ from the Layer-3
// names.
const (
	ToolPreJourney = "PRE_JOURNEY"
	ToolJourney    = "JOURNEY"
)

// States lists every Layer-3 state (the overlay last).
var States = []State{Inquiry, PendingConfirmation, Confirmed, Amendment, DisruptionReview, PartyUnresponsive,
	InJourney, Completion, Cancelled, CancelledSuspended, Suspended}

// Terminal reports whether s ends the booking's life.
func (s State) Terminal() bool {
	return s == Completion || s == Cancelled || s == CancelledSuspended
}

// PostConfirmation reports whether s comes after the booking's
// confirmation (the seed's "any post-CONFIRMATION state").
func (s State) PostConfirmation() bool {
	switch s {
	case Confirmed, Amendment, DisruptionReview, PartyUnresponsive, InJourney, Completion:
		return true
	}
	return false
}

// toolNames maps Layer-3 states whose tool-catalogue name differs.
var toolNames = map[State]string{Confirmed: ToolPreJourney, InJourney: ToolJourney}

// ToolName is the tool-catalogue name of a Layer-3 state.
func (s State) ToolName() string {
	if n, ok := toolNames[s]; ok {
		return n
	}
	return string(s)
}

// ParseState reads a state by its Layer-3 or tool-catalogue name
// (PRE_JOURNEY is CONFIRMED, JOURNEY is IN_JOURNEY), or the pseudo-target
// RESUME. The error lists the names accepted.
func ParseState(name string) (State, error) {
	n := strings.ToUpper(strings.TrimSpace(name))
	for s, t := range toolNames {
		if n == t {
			return s, nil
		}
	}
	if n == string(Resume) || slices.Contains(States, State(n)) {
		return State(n), nil
	}
	names := make([]string, 0, len(States)+3)
	for _, s := range States {
		names = append(names, string(s))
	}
	names = append(names, ToolPreJourney, ToolJourney, string(Resume))
	return "", fmt.Errorf("%w: %q is not a booking state; use one of %s", ErrBadInput, name, strings.Join(names, ", "))
}

// Transitions is the Layer-3 transition table: the targets each state may
// move to (besides Suspended, allowed from every non-terminal state, and
// the return from an interrupting state, see Returns). A transition not
// listed is refused with ErrIllegalTransition.
var Transitions = map[State][]State{
	Inquiry:             {PendingConfirmation, Cancelled},
	PendingConfirmation: {Confirmed, Inquiry, Cancelled},
	Confirmed:           {InJourney, Amendment, DisruptionReview, PartyUnresponsive, Cancelled},
	InJourney:           {Completion, Amendment, DisruptionReview, PartyUnresponsive},
	Amendment:           {Cancelled},
	DisruptionReview:    {Amendment, PartyUnresponsive, Cancelled},
	PartyUnresponsive:   {Amendment, Cancelled},
}

// Returns lists the interrupting states: they remember the state they
// interrupted (CONFIRMED or IN_JOURNEY, Booking.ReturnState) and may go
// back to it, and only to it.
var Returns = []State{Amendment, DisruptionReview, PartyUnresponsive}

// Timeout is a state's clock: After the booking entered the state, Tick
// moves it To (Return: back to the state it interrupted).
type Timeout struct {
	After  time.Duration
	To     State
	Return bool
}

// Timeouts are the state clocks. PENDING_CONFIRMATION expires into
// cancellation; AMENDMENT not concluded reverts to the state it
// interrupted; DISRUPTION_REVIEW not resolved within PT1H means the
// responsible party is unresponsive; PARTY_UNRESPONSIVE for PT24H cancels.
var Timeouts = map[State]Timeout{
	PendingConfirmation: {After: 48 * time.Hour, To: Cancelled},
	Amendment:           {After: 24 * time.Hour, Return: true},
	DisruptionReview:    {After: time.Hour, To: PartyUnresponsive},
	PartyUnresponsive:   {After: 24 * time.Hour, To: Cancelled},
}

// checkTransition says whether b may move to target (neither Suspended nor
// Resume, which Store handles).
func checkTransition(b *Booking, to State) error {
	from := b.State
	if from.Terminal() {
		return fmt.Errorf("%w: booking %s is %s, a terminal state; nothing moves it", ErrIllegalTransition, b.ID, from)
	}
	if slices.Contains(Returns, from) && (to == Confirmed || to == InJourney) {
		if to != b.ReturnState {
			return fmt.Errorf("%w: booking %s in %s interrupted %s and may only return to it, not move to %s", ErrIllegalTransition, b.ID, from, b.ReturnState, to)
		}
		return nil
	}
	if slices.Contains(Transitions[from], to) {
		return nil
	}
	allowed := slices.Clone(Transitions[from])
	if slices.Contains(Returns, from) && b.ReturnState != "" {
		allowed = append(allowed, b.ReturnState)
	}
	names := make([]string, len(allowed))
	for i, s := range allowed {
		names[i] = string(s)
	}
	return fmt.Errorf("%w: booking %s cannot move from %s to %s; from %s it may move to %s (or %s)", ErrIllegalTransition, b.ID, from, to, from,
		strings.Join(names, ", "), Suspended)
}
