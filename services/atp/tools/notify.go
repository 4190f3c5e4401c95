package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/atp/rails"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// Channels of atp_notify_traveller.
var Channels = []string{"WHATSAPP", "SMS", "EMAIL"}

// RuntimeActor is the identity notifications are attributed to (seed:
// "attributed to the ATP runtime actor identity").
const RuntimeActor = "atp-runtime"

func (s *Service) notifySpec() spec {
	return spec{name: ToolNotifyTraveller, action: `ATPAction::"notify_traveller"`, scope: ScopeNotificationSend, risk: registry.RiskMedium,
		desc: "Send a message to one participant by WHATSAPP, SMS or EMAIL; recorded as a NotificationEvent in the booking's log. PRE_JOURNEY, JOURNEY or DISRUPTION_REVIEW.",
		params: `{"type":"object","required":["booking_object_id","recipient_participant_id","channel","message_body"],"additionalProperties":false,"properties":{
"booking_object_id":` + bookingIDSchema + `,"recipient_participant_id":{"type":"string","minLength":1},"channel":{"enum":["WHATSAPP","SMS","EMAIL"]},
"message_body":{"type":"string","minLength":1,"maxLength":4000},"template_id":{"type":"string"}}}`,
		writes: true, run: s.notifyTraveller}
}

func (s *Service) notifyTraveller(ctx context.Context, c *worker.Call) (any, error) {
	var a struct {
		bookingArg
		Recipient  string `json:"recipient_participant_id"`
		Channel    string `json:"channel"`
		Body       string `json:"message_body"`
		TemplateID string `json:"template_id"`
	}
	if err := bind(c, &a); err != nil {
		return nil, err
	}
	id := callID("ntf", c)
	// A call redelivered after its notification was logged answers the
	// same (the provider is not called twice).
	var prev json.RawMessage
	if err := s.store.State().View(ctx, func(tx state.Tx) error {
		v, found, err := tx.Bucket(c.ProjectID, booking.BucketNotifications).Get(id)
		if found {
			prev = append(json.RawMessage{}, v...)
		}
		return err
	}); err != nil {
		return nil, err
	}
	if prev != nil {
		var out map[string]any
		return out, json.Unmarshal(prev, &out)
	}
	b, err := s.store.Get(ctx, c.ProjectID, a.BookingObjectID)
	if err != nil {
		return nil, err
	}
	if err := needState(ToolNotifyTraveller, b, booking.ToolPreJourney, booking.ToolJourney, string(booking.DisruptionReview)); err != nil {
		return nil, err
	}
	p := b.Participant(a.Recipient)
	if p == nil {
		return nil, worker.Fail(card.CodeBadRequest, fmt.Sprintf("booking %s has no participant %q", b.ID, a.Recipient))
	}
	to := map[string]string{"EMAIL": p.Email, "SMS": p.Phone, "WHATSAPP": p.WhatsApp}[a.Channel]
	if to == "" {
		var have []string
		for _, ch := range Channels {
			if map[string]string{"EMAIL": p.Email, "SMS": p.Phone, "WHATSAPP": p.WhatsApp}[ch] != "" {
				have = append(have, ch)
			}
		}
		return nil, worker.Fail(card.CodeBadRequest, fmt.Sprintf("participant %s has no %s address; channels with an address: %s", p.ParticipantID, a.Channel, orNone(have)))
	}
	var rules []rails.ContentRule
	if s.deps.ContentRules != nil {
		rules = s.deps.ContentRules(c.ProjectID)
	}
	if rules == nil {
		rules = rails.DefaultContentRules()
	}
	content, err := rails.NewContent(rules)
	if err != nil {
		return nil, worker.Fail(card.CodeInternalError, "atp: the project's Rail 2 rules do not compile: "+err.Error())
	}
	if v := content.Check(a.Body); v != nil {
		// Logged, not sent: the content for operators only, the fact for everyone.
		if _, err := s.store.Update(ctx, c.ProjectID, b.ID, func(tx *booking.Tx) error {
			if _, err := tx.Append(booking.EventGuardrail, "atp.rail2", map[string]any{"rail": v.Rail, "rule_id": v.RuleID, "reason": v.Reason,
				"notification_id": id, "channel": a.Channel, "recipient_participant_id": p.ParticipantID, "message_body": a.Body, "requested_by": toolkit.Actor(c)}); err != nil {
				return err
			}
			_, err := tx.Append(booking.EventNotification, RuntimeActor, map[string]any{"notification_id": id, "channel": a.Channel,
				"recipient_participant_id": p.ParticipantID, "delivery_status": "BLOCKED", "rule_id": v.RuleID, "requested_by": toolkit.Actor(c)})
			return err
		}); err != nil {
			return nil, err
		}
		return nil, v
	}
	// A failed delivery is in the booking's log with its channel and
	// outcome, like a sent or blocked one.
	logFailed := func(reason string) string {
		if _, err := s.store.Update(ctx, c.ProjectID, b.ID, func(tx *booking.Tx) error {
			_, err := tx.Append(booking.EventNotification, RuntimeActor, map[string]any{"notification_id": id, "channel": a.Channel,
				"recipient_participant_id": p.ParticipantID, "delivery_status": "FAILED", "error": reason, "requested_by": toolkit.Actor(c)})
			return err
		}); err != nil {
			s.deps.Logger.Warn("atp: a failed notification could not be logged", "project", c.ProjectID, "booking", b.ID, "notification", id, "err", err)
			return "; logging the failure failed too: " + err.Error()
		}
		return "; the failure is in the booking's log"
	}
	n := s.deps.Notifiers[a.Channel]
	if n == nil {
		why := fmt.Sprintf("no %s provider is configured for the atp service (EMAIL: SMTP server; SMS, WHATSAPP: webhook URL); nothing was sent", a.Channel)
		return nil, worker.Fail(card.CodeUpstreamUnavailable, why+logFailed(why))
	}
	providerID, err := n.Send(ctx, atp.Message{NotificationID: id, Channel: a.Channel, To: to, Body: a.Body, TemplateID: a.TemplateID, BookingID: b.ID})
	if err != nil {
		logged := logFailed(err.Error())
		return nil, worker.Fail(card.CodeUpstreamUnavailable, fmt.Sprintf("%s delivery to participant %s failed: %v%s; call again to retry", a.Channel, p.ParticipantID, err, logged))
	}
	var out map[string]any
	setResult(ctx, resultMap(&out)) // the log entry of the sent message is the call's change
	_, err = s.store.Update(ctx, c.ProjectID, b.ID, func(tx *booking.Tx) error {
		out = nil // the closure may run again
		ev, err := tx.Append(booking.EventNotification, RuntimeActor, map[string]any{"notification_id": id, "channel": a.Channel,
			"recipient_participant_id": p.ParticipantID, "delivery_status": "SENT", "provider_message_id": providerID,
			"template_id": a.TemplateID, "message_body": a.Body, "requested_by": toolkit.Actor(c)})
		if err != nil {
			return err
		}
		out = map[string]any{"notification_id": id, "channel": a.Channel, "recipient_participant_id": p.ParticipantID,
			"delivery_status": "SENT", "provider_message_id": providerID, "event_log_entry_id": ev.ID, "sent_at": ev.Time, "attributed_to": RuntimeActor}
		raw, err := json.Marshal(out)
		if err != nil {
			return err
		}
		return tx.State().Bucket(c.ProjectID, booking.BucketNotifications).Put(id, raw)
	})
	if err != nil {
		return nil, fmt.Errorf("the %s message WAS sent (provider id %q) but could not be logged: %w", a.Channel, providerID, err)
	}
	return out, nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
