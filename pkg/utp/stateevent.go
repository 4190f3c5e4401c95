package utp

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrInvalidStateEvent: a state event's payload is not one.
var ErrInvalidStateEvent = errors.New("utp: invalid state event")

// StateEventType is the type of a StateEvent.
const StateEventType = "state_transition"

// StateEvent is the payload of a state event
// (subjects.StateEvent; docs/protocol.md, "State events"): one committed
// state transition of a tool service's resource, such as an ATP booking.
// It points at the service's record of the transition (EventID) and
// carries the old and new state, so a subscriber re-runs its Windley query
// without another read.
type StateEvent struct {
	// Type is StateEventType.
	Type string `json:"type"`
	// Service is the tool service ("atp").
	Service   string `json:"service"`
	ProjectID string `json:"project_id"`
	// ResourceID is the resource that changed (ATP: the booking_object_id).
	ResourceID string `json:"resource_id"`
	// OldState and NewState are the states the gate sees
	// (authz context.booking_state), before and after.
	OldState string `json:"old_state"`
	NewState string `json:"new_state"`
	// EventID is the service's record of the transition (ATP: the event
	// log's event_log_entry_id); it is the message's Nats-Msg-Id too.
	EventID string `json:"event_id"`
	// Actor is who made the transition ("agent:<id>", "operator:<name>",
	// or the service's own actor, e.g. "atp.timeout").
	Actor string    `json:"actor"`
	Time  time.Time `json:"time"`
	// Detail is the service's own data of the transition (ATP: the
	// event's from/to Layer-3 states, reason, suspended).
	Detail json.RawMessage `json:"detail,omitempty"`
}

// DecodeStateEvent decodes and checks a state event's payload.
func DecodeStateEvent(data []byte) (*StateEvent, error) {
	var e StateEvent
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("%w: state event: %v", ErrInvalidStateEvent, err)
	}
	if e.Type != StateEventType || e.Service == "" || e.ResourceID == "" || e.NewState == "" {
		return nil, fmt.Errorf("%w: state event needs type %q, service, resource_id and new_state", ErrInvalidStateEvent, StateEventType)
	}
	return &e, nil
}
