package tools

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/subjects"
)

// ServiceName is the service's name in its state events' subjects
// (subjects.StateEvent) and payloads (utp.StateEvent.Service).
const ServiceName = "atp"

// stateEventTimeout bounds the publication of one state event.
const stateEventTimeout = 5 * time.Second

// transitionDetail is a STATE_TRANSITION or STATE_TIMEOUT event's data.
type transitionDetail struct {
	FromTool string `json:"from_tool_state"`
	ToTool   string `json:"to_tool_state"`
}

// publishTransitions announces the committed state transitions among
// events (STATE_TRANSITION, STATE_TIMEOUT) on the booking's state-event
// subject (subjects.StateEvent; docs/protocol.md, "State events"), each
// once (Nats-Msg-Id: the event_log_entry_id). The booking store calls it
// after every committed change (booking.Options.Committed). The event log
// is the record: a publication that fails is logged, and a subscriber
// that missed it reads the state from atp_get_booking_status.
func (s *Service) publishTransitions(ctx context.Context, project, bookingID string, events []booking.Event) {
	var msgs []*nats.Msg
	for _, ev := range events {
		if ev.Type != booking.EventTransition && ev.Type != booking.EventTimeout {
			continue
		}
		var d transitionDetail
		_ = json.Unmarshal(ev.Data, &d)
		subj, err := subjects.StateEvent(subjects.DefaultVersion, project, ServiceName, bookingID)
		if err != nil {
			s.deps.Logger.Warn("atp: state event not published: no subject for the booking", "project", project, "booking", bookingID, "err", err)
			return
		}
		body, _ := json.Marshal(utp.StateEvent{Type: utp.StateEventType, Service: ServiceName, ProjectID: project, ResourceID: bookingID,
			OldState: d.FromTool, NewState: d.ToTool, EventID: ev.ID, Actor: ev.Actor, Time: ev.Time, Detail: ev.Data})
		m := nats.NewMsg(subj.String())
		m.Data = body
		m.Header.Set(jetstream.MsgIDHeader, ev.ID)
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 || (s.deps.NC == nil && s.deps.Resolve == nil) {
		return
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateEventTimeout)
	defer cancel()
	nc, _, err := s.deps.Conn(pctx)
	if err == nil {
		var js jetstream.JetStream
		if js, err = jetstream.New(nc); err == nil {
			for _, m := range msgs {
				if _, err = js.PublishMsg(pctx, m); err != nil {
					break
				}
			}
		}
	}
	if err != nil {
		s.deps.Logger.Warn("atp: state event not published (the booking's event log has the transition)", "project", project, "booking", bookingID, "err", err)
	}
}
