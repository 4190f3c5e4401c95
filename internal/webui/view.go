package webui

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/turn"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
)

// minBar is the narrowest bar, in percent of the timeline, so that an
// instant call stays visible.
const minBar = 0.4

// TurnView is a turn laid out as a timeline: one row per tool call, a bar
// from its tool.call card's created_at to its tool.result card's, and the
// waits between calls.
type TurnView struct {
	Turn *turn.Turn
	// Start and End bound the timeline; Span is End − Start.
	Start, End time.Time
	Span       time.Duration
	Rows       []Row
	// Confirmations are the turn's ATLAS calls that parked for
	// confirmation (pending, resolved or expired).
	Confirmations []Confirmation
	// Replayable counts the calls a replay would re-run; ReplaySkipped
	// the ones it would skip (no tool.call card).
	Replayable, ReplaySkipped int
}

// Row is one tool call on the timeline.
type Row struct {
	Call *turn.Call
	// Class is the colour class: the status, or "confirm" for a result
	// that waits for confirmation.
	Class string
	// Left and Width place the bar, in percent of the timeline.
	Left, Width float64
	// Wait is the time between the end of the calls before this one and
	// its start (0 when it overlaps them); WaitLeft and WaitWidth place it.
	Wait                time.Duration
	WaitLeft, WaitWidth float64
	// Running marks a pending call whose bar ends now.
	Running bool
	// CallJSON and ResultJSON are the cards, indented ("" when missing).
	CallJSON, ResultJSON string
	// Confirmation is set when the call's result parked for confirmation.
	Confirmation *Confirmation
}

// Confirmation is an ATLAS call whose result was PENDING_CONFIRM.
type Confirmation struct {
	ConfirmationID string
	ToolName       string
	ToolCallID     string
	Would          string
	ExpiresAt      string
	// State is "pending", "expired", or how it was resolved: the
	// transition's status (OK, SKIPPED, FAILED).
	State string
	// By names the resolving call (ATLAS_CONFIRM/ATLAS_CANCEL) when resolved.
	ByToolCallID, ByAgentTurnID, AtUTC string
}

// Pending reports whether Confirm and Cancel apply.
func (c *Confirmation) Pending() bool { return c.State == "pending" }

// pendingResult is the result an ATLAS call parks with (the wire shape of
// docs/protocol.md §16).
type pendingResult = receipts.PendingResult

// layout builds the timeline of t at time now.
func layout(t *turn.Turn, now time.Time) *TurnView {
	v := &TurnView{Turn: t, Rows: make([]Row, len(t.Calls))}
	if p, err := turn.PlanReplay(t, turn.ReplayOptions{NewTurnID: "plan-" + t.AgentTurnID}); err == nil {
		v.Replayable, v.ReplaySkipped = len(p.Steps), len(p.Skipped)
	} else if p != nil {
		v.ReplaySkipped = len(p.Skipped)
	}
	resolved := transitions(t)
	for i := range t.Calls {
		c := &t.Calls[i]
		v.Start = earliest(v.Start, c.CalledAt, c.FinishedAt)
		end := c.FinishedAt
		if end.IsZero() {
			end = now
		}
		if end.After(v.End) {
			v.End = end
		}
	}
	if v.End.Before(v.Start) {
		v.End = v.Start
	}
	v.Span = v.End.Sub(v.Start)
	span := float64(max(v.Span, time.Millisecond))
	pct := func(d time.Duration) float64 { return 100 * float64(d) / span }
	var prevEnd time.Time
	for i := range t.Calls {
		c := &t.Calls[i]
		r := &v.Rows[i]
		r.Call, r.Class = c, statusClass(c.Status)
		from, to := c.CalledAt, c.FinishedAt
		if from.IsZero() {
			from = to
		}
		if to.IsZero() {
			to, r.Running = now, c.Status == turn.StatusPending
			if to.Before(from) {
				to = from
			}
		}
		r.Left = pct(from.Sub(v.Start))
		r.Width = max(pct(to.Sub(from)), minBar)
		if r.Left+r.Width > 100 {
			r.Left = max(100-r.Width, 0)
		}
		if !prevEnd.IsZero() && from.After(prevEnd) {
			r.Wait = from.Sub(prevEnd)
			r.WaitLeft, r.WaitWidth = pct(prevEnd.Sub(v.Start)), pct(r.Wait)
		}
		if to.After(prevEnd) {
			prevEnd = to
		}
		r.CallJSON, r.ResultJSON = cardJSON(c.CallCard), cardJSON(c.ResultCard)
		if cf := confirmation(c, resolved, now); cf != nil {
			r.Confirmation = cf
			if cf.Pending() {
				r.Class = "confirm"
			}
			v.Confirmations = append(v.Confirmations, *cf)
		}
	}
	return v
}

func earliest(cur time.Time, ts ...time.Time) time.Time {
	for _, t := range ts {
		if !t.IsZero() && (cur.IsZero() || t.Before(cur)) {
			cur = t
		}
	}
	return cur
}

// statusClass maps a call status to a CSS class (unknown statuses share
// one).
func statusClass(status string) string {
	switch status {
	case string(card.StatusSuccess), string(card.StatusFailed), string(card.StatusCanceled),
		string(card.StatusTimeout), string(card.StatusPartial), turn.StatusPending, turn.StatusUnreadable:
		return status
	}
	return "other"
}

// transitions reads the turn's ATLAS transition receipts: tool_call_id →
// how its pending confirmation was resolved.
func transitions(t *turn.Turn) map[string]*receipts.Transition {
	out := map[string]*receipts.Transition{}
	for _, o := range t.Others {
		if o.Card.Type != receipts.CardType {
			continue
		}
		var rec receipts.Record
		if json.Unmarshal(o.Card.Content, &rec) != nil || rec.Kind != receipts.KindTransition || rec.Transition == nil {
			continue
		}
		out[rec.Transition.ToolCallID] = rec.Transition
	}
	return out
}

// confirmation returns the call's parked confirmation, nil when its
// result is not PENDING_CONFIRM.
func confirmation(c *turn.Call, resolved map[string]*receipts.Transition, now time.Time) *Confirmation {
	if c.Status != string(card.StatusSuccess) || !bytes.Contains(c.Result, []byte(receipts.StatusPendingConfirm)) {
		return nil
	}
	var p pendingResult
	if json.Unmarshal(c.Result, &p) != nil || p.Status != receipts.StatusPendingConfirm || p.ConfirmationID == "" {
		return nil
	}
	cf := &Confirmation{ConfirmationID: p.ConfirmationID, ToolName: p.ToolName, ToolCallID: c.ToolCallID,
		Would: indent(p.Would), ExpiresAt: p.ExpiresAt, State: "pending"}
	if tr := resolved[c.ToolCallID]; tr != nil {
		cf.State, cf.ByToolCallID, cf.ByAgentTurnID, cf.AtUTC = tr.To, tr.ByToolCallID, tr.ByAgentTurnID, tr.AtUTC
	} else if exp, err := time.Parse(time.RFC3339, p.ExpiresAt); err == nil && now.After(exp) {
		cf.State = "expired"
	}
	return cf
}

// cardJSON renders a card as indented JSON, its content decoded in place.
func cardJSON(c *card.Card) string {
	if c == nil {
		return ""
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// indent pretty-prints raw JSON (or returns it as it is when invalid).
func indent(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}
