// Package rails holds the ATP guardrails as deterministic pre-handlers
// (no model, no network): Rail 1 before a HEM escalation and Rail 2 before
// a notification. A blocked call ends failed with code atp_guardrail and
// leaves a GUARDRAIL event in the booking's log, which only operators'
// tools show.
package rails

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"

	"github.com/utpmesh/utpmesh/services/atp/booking"
)

// Rail names.
const (
	Rail1 = "RAIL_1_HEM"
	Rail2 = "RAIL_2_CONTENT"
)

// Violation is a blocked call.
type Violation struct {
	Rail   string `json:"rail"`
	RuleID string `json:"rule_id"`
	Reason string `json:"reason"`
}

func (v *Violation) Error() string {
	return fmt.Sprintf("%s blocked the call (rule %s): %s", v.Rail, v.RuleID, v.Reason)
}

// EscalationRule is Rail 1 for one HEM: what the booking's log must show
// before the HEM may be invoked.
type EscalationRule struct {
	// LowerInterventions are event types of which at least one must be in
	// the log already (a lower intervention tried first), e.g.
	// ["NOTIFICATION"]. Empty: none needed.
	LowerInterventions []string `json:"lower_interventions,omitempty"`
	// SafetyCheck is a check_type that must have been recorded (the
	// weather HEMs need WEATHER_GO_NOGO). Empty: none.
	SafetyCheck string `json:"safety_check,omitempty"`
}

// CheckEscalation applies Rail 1 to a booking's log.
func CheckEscalation(hemID string, r *EscalationRule, log []booking.Event) *Violation {
	if r == nil {
		return nil
	}
	if len(r.LowerInterventions) > 0 && !slices.ContainsFunc(log, func(e booking.Event) bool { return slices.Contains(r.LowerInterventions, e.Type) }) {
		return &Violation{Rail: Rail1, RuleID: hemID + ":lower-intervention",
			Reason: fmt.Sprintf("%s needs a lower intervention first: the booking's log has no %v event (e.g. atp_notify_traveller)", hemID, r.LowerInterventions)}
	}
	if r.SafetyCheck != "" && !slices.ContainsFunc(log, func(e booking.Event) bool {
		if e.Type != booking.EventSafetyCheck {
			return false
		}
		var d struct {
			CheckType string `json:"check_type"`
		}
		return json.Unmarshal(e.Data, &d) == nil && d.CheckType == r.SafetyCheck
	}) {
		return &Violation{Rail: Rail1, RuleID: hemID + ":safety-check",
			Reason: fmt.Sprintf("%s needs a %s safety check recorded first (atp_record_safety_check)", hemID, r.SafetyCheck)}
	}
	return nil
}

// ContentRule is one Rail 2 rule: a message matching Pattern is blocked.
type ContentRule struct {
	ID      string `json:"id"`
	Pattern string `json:"pattern"`
	Reason  string `json:"reason"`
	re      *regexp.Regexp
}

// DefaultContentRules apply when a project configures none.
func DefaultContentRules() []ContentRule {
	return []ContentRule{
		{ID: "no-card-numbers", Pattern: `\b(?:\d[ -]?){13,19}\b`, Reason: "looks like a payment card number; never send card data to travellers"},
		{ID: "no-credential-requests", Pattern: `(?i)\b(password|passcode|PIN code|CVV|security code)\b`, Reason: "asks for or shares a credential"},
	}
}

// Content is a compiled Rail 2 rule set.
type Content struct{ rules []ContentRule }

// NewContent compiles rules; the error names the bad rule.
func NewContent(rules []ContentRule) (*Content, error) {
	c := &Content{}
	for _, r := range rules {
		if r.ID == "" {
			return nil, fmt.Errorf("rails: a content rule needs an id")
		}
		re, err := regexp.Compile(r.Pattern)
		if err != nil {
			return nil, fmt.Errorf("rails: content rule %s: pattern: %v", r.ID, err)
		}
		r.re = re
		c.rules = append(c.rules, r)
	}
	return c, nil
}

// Check applies Rail 2 to a message body.
func (c *Content) Check(body string) *Violation {
	for _, r := range c.rules {
		if r.re.MatchString(body) {
			return &Violation{Rail: Rail2, RuleID: r.ID, Reason: r.Reason}
		}
	}
	return nil
}
