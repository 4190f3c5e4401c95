package webui

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/confirm"
	"github.com/utpmesh/utpmesh/pkg/turn"
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
	// Confirmations are the turn's calls that parked for a human's
	// confirmation (pending, resolved or expired; package confirm).
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

// Confirmation is a call whose result waits for a human's confirmation
// (a confirm.Pending).
type Confirmation struct {
	ConfirmationID string
	ToolName       string
	ToolCallID     string
	Would          string
	ExpiresAt      string
	// ConfirmTool and CancelTool resolve it (the pending result's, defaults
	// applied).
	ConfirmTool, CancelTool string
	// State is "pending", "expired", or how it was resolved: the
	// resolution record's status (OK, SKIPPED, FAILED).
	State string
	// By names the resolving call when resolved.
	ByToolCallID, ByAgentTurnID, AtUTC string
}

// Pending reports whether Confirm and Cancel apply.
func (c *Confirmation) Pending() bool { return c.State == "pending" }

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

// transitions reads the turn's resolution records (confirm.Resolution,
// e.g. ATLAS's transition receipts): tool_call_id → how its pending
// confirmation was resolved.
func transitions(t *turn.Turn) map[string]*confirm.Resolution {
	out := map[string]*confirm.Resolution{}
	for _, o := range t.Others {
		if r, ok := confirm.ParseResolution(o.Card.Content); ok {
			out[r.ToolCallID] = r
		}
	}
	return out
}

// confirmation returns the call's parked confirmation, nil when its
// result is not a pending confirmation.
func confirmation(c *turn.Call, resolved map[string]*confirm.Resolution, now time.Time) *Confirmation {
	if c.Status != string(card.StatusSuccess) {
		return nil
	}
	p, ok := confirm.Parse(c.Result)
	if !ok {
		return nil
	}
	cf := &Confirmation{ConfirmationID: p.ConfirmationID, ToolName: p.ToolName, ToolCallID: c.ToolCallID,
		Would: indent(p.Would), ExpiresAt: p.ExpiresAt, State: "pending"}
	cf.ConfirmTool, cf.CancelTool = p.Resolvers()
	if tr := resolved[c.ToolCallID]; tr != nil && tr.ConfirmationID == p.ConfirmationID {
		cf.State, cf.ByToolCallID, cf.ByAgentTurnID, cf.AtUTC = tr.To, tr.ByToolCallID, tr.ByAgentTurnID, tr.AtUTC
	} else if p.Expired(now) {
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
