// Package hem is the Human Escalation Mechanism of the ATP service: the
// HEM catalogue (as data), and the lifecycle of an atp_invoke_hem task —
// PENDING until an operator confirms (COMPLETE) or declines (DECLINED), or
// until its protocol_deadline passes and the entry's secondary path
// decides. Tasks live in the service's bbolt file beside the bookings, so
// a restart in any phase loses nothing; while a task is PENDING its
// booking accepts no state transition.
package hem

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/services/atp/rails"
)

// Entry is one HEM of the catalogue.
type Entry struct {
	HEMID string `json:"hem_id"`
	Title string `json:"title"`
	// Priority is P1 (highest) to P4.
	Priority string `json:"priority"`
	// ProtocolDeadline is how long the operator has to decide (ISO 8601
	// text in Deadline).
	ProtocolDeadline time.Duration `json:"-"`
	Deadline         string        `json:"protocol_deadline"`
	// States are the tool states the booking must be in; empty: any (or
	// no booking, when NeedsBooking is false).
	States       []string `json:"precondition_states"`
	NeedsBooking bool     `json:"needs_booking"`
	// TriggerReasons are the accepted context.trigger_reason values;
	// empty: any.
	TriggerReasons []string `json:"trigger_reasons,omitempty"`
	// TokenRequired: confirming needs the task's human_confirmation_token
	// (shown to the operator with the elicitation).
	TokenRequired bool `json:"human_confirmation_token_required"`
	// Outcome is the hem_outcome of a confirmed task.
	Outcome string `json:"hem_outcome"`
	// Secondary is what happens when the deadline passes without a
	// decision.
	Secondary Secondary `json:"secondary_path"`
	// Rail1 is the entry's escalation guardrail (nil: none).
	Rail1 *rails.EscalationRule `json:"rail_1,omitempty"`
}

// Secondary is a HEM's secondary path.
type Secondary struct {
	// Status is the task's end status: DECLINED (nothing is done) or
	// COMPLETE (Outcome is applied without the operator).
	Status string `json:"status"`
	// Outcome is the hem_outcome when Status is COMPLETE.
	Outcome     string `json:"hem_outcome,omitempty"`
	Description string `json:"description"`
}

// Task statuses.
const (
	StatusPending  = "PENDING"
	StatusComplete = "COMPLETE"
	StatusDeclined = "DECLINED"
)

// TriggerMandateGap is the trigger_reason of a mandate-gap escalation
// (addendum MCP-D15).
const TriggerMandateGap = "MANDATE_GAP_DETECTED"

// MandateGapID is the HEM of mandate-gap escalations.
const MandateGapID = "HEM-MANDATE-01"

// Default is the built-in catalogue: HEM-01…HEM-23 of the public Layer 3
// invocation catalogue (layer3.go) and HEM-MANDATE-01, the mandate-gap
// escalation of the seeds' Windley Loop addendum. A project adds or
// replaces entries with Catalogue.Add (docs/catalogues/atp.md).
func Default() *Catalogue {
	c := &Catalogue{entries: map[string]Entry{}}
	for _, e := range layer3 {
		if err := c.Add(e); err != nil {
			panic(err) // a broken built-in row is a bug caught by every test
		}
	}
	_ = c.Add(Entry{HEMID: MandateGapID, Title: "Mandate gap: approve a mandate expansion", Priority: "P3", Deadline: "PT4H",
		TriggerReasons: []string{TriggerMandateGap}, TokenRequired: true, Outcome: "MANDATE_EXPANSION_APPROVED",
		Secondary: Secondary{Status: StatusDeclined, Description: "no operator decision by the deadline: the expansion is refused and the agent keeps its mandate (narrowing property: never widen by default)"}})
	return c
}

// Catalogue is a set of HEM entries.
type Catalogue struct {
	entries map[string]Entry
}

// Add adds or replaces an entry after checking it.
func (c *Catalogue) Add(e Entry) error {
	if !strings.HasPrefix(e.HEMID, "HEM-") {
		return fmt.Errorf("hem: hem_id %q must start with HEM- (e.g. HEM-07)", e.HEMID)
	}
	if !slices.Contains([]string{"P1", "P2", "P3", "P4"}, e.Priority) {
		return fmt.Errorf("hem: %s: priority %q; use P1, P2, P3 or P4", e.HEMID, e.Priority)
	}
	d, err := ParseDuration(e.Deadline)
	if err != nil {
		return fmt.Errorf("hem: %s: protocol_deadline: %w", e.HEMID, err)
	}
	e.ProtocolDeadline = d
	if e.Secondary.Status != StatusDeclined && e.Secondary.Status != StatusComplete {
		return fmt.Errorf("hem: %s: secondary_path.status %q; use DECLINED or COMPLETE", e.HEMID, e.Secondary.Status)
	}
	if e.Outcome == "" {
		return fmt.Errorf("hem: %s: no hem_outcome", e.HEMID)
	}
	if e.Secondary.Status == StatusComplete && e.Secondary.Outcome == "" {
		e.Secondary.Outcome = e.Outcome
	}
	c.entries[e.HEMID] = e
	return nil
}

// Get returns an entry.
func (c *Catalogue) Get(id string) (Entry, bool) {
	e, ok := c.entries[id]
	return e, ok
}

// IDs lists the hem_ids, sorted.
func (c *Catalogue) IDs() []string {
	out := make([]string, 0, len(c.entries))
	for id := range c.entries {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// ParseDuration reads the ISO 8601 durations the catalogue uses: PnD,
// PTnH, PTnM, PTnS and combinations (P1DT2H).
func ParseDuration(s string) (time.Duration, error) {
	if !strings.HasPrefix(s, "P") || len(s) < 3 {
		return 0, fmt.Errorf("%q is not an ISO 8601 duration such as PT4H or P1D", s)
	}
	var d time.Duration
	inTime := false
	num := ""
	for _, r := range s[1:] {
		switch {
		case r == 'T':
			inTime = true
		case r >= '0' && r <= '9':
			num += string(r)
		default:
			if num == "" {
				return 0, fmt.Errorf("%q is not an ISO 8601 duration such as PT4H or P1D", s)
			}
			var n int64
			fmt.Sscan(num, &n)
			num = ""
			unit := map[rune]time.Duration{'D': 24 * time.Hour, 'H': time.Hour, 'M': time.Minute, 'S': time.Second}[r]
			if unit == 0 || (r == 'D') == inTime {
				return 0, fmt.Errorf("%q is not an ISO 8601 duration such as PT4H or P1D", s)
			}
			d += time.Duration(n) * unit
		}
	}
	if num != "" || d <= 0 {
		return 0, fmt.Errorf("%q is not an ISO 8601 duration such as PT4H or P1D", s)
	}
	return d, nil
}
