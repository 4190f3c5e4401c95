package turn

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxInline is how many bytes of arguments, results and error messages
// the timeline prints on one line before cutting them with "…". Use the
// JSON form (or `utpmesh cards get`) for the full values.
const MaxInline = 160

// WriteTimeline writes a readable timeline of the turn: a header, then
// every tool call (with its result) and every other card, in write order.
//
//	turn turn-1 · project demo · agent agent-1 · epochs 1 · 1 call (1 success) · 2 cards
//	from 2025-06-01T12:00:00Z to 2025-06-01T12:00:00.004Z (4ms)
//	#1    12:00:00.000  echo  call-1  step s1  epoch 1
//	      args    {"x":1}
//	      result  success · suspend · 4ms · epoch 1 · by worker-a
//	      value   {"x":1}
//
// Long values are cut at MaxInline bytes; see ExampleWriteTimeline.
func WriteTimeline(w io.Writer, t *Turn) error {
	// A turn of 10,000 calls is ~50,000 lines: one write each would be
	// one system call each on an unbuffered file such as os.Stdout.
	bw := bufio.NewWriterSize(w, 64<<10)
	ew := &errWriter{w: bw}
	writeTimeline(ew, t)
	if ew.err == nil {
		ew.err = bw.Flush()
	}
	return ew.err
}

func writeTimeline(ew *errWriter, t *Turn) {
	ew.printf("turn %s · project %s", t.AgentTurnID, t.ProjectID)
	if t.AgentID != "" {
		ew.printf(" · agent %s", t.AgentID)
	}
	ew.printf(" · epochs %s · %s (%s) · %d cards\n", joinInts(t.Epochs), plural(len(t.Calls), "call", "calls"), countsText(t.Counts), t.Cards)
	if !t.FirstAt.IsZero() {
		ew.printf("from %s to %s (%s)\n", t.FirstAt.UTC().Format(time.RFC3339Nano), t.LastAt.UTC().Format(time.RFC3339Nano), t.LastAt.Sub(t.FirstAt).Round(time.Millisecond))
	}
	ci, oi := 0, 0
	for ci < len(t.Calls) || oi < len(t.Others) {
		if oi >= len(t.Others) || (ci < len(t.Calls) && t.Calls[ci].Seq < t.Others[oi].Seq) {
			writeCall(ew, &t.Calls[ci])
			ci++
			continue
		}
		o := t.Others[oi]
		oi++
		ew.printf("#%-4d %s  %s  %s", o.Seq, clock(o.Card.CreatedAt), o.Card.Type, o.Card.CardID)
		if o.Card.Metadata.StepID != "" {
			ew.printf("  step %s", o.Card.Metadata.StepID)
		}
		ew.printf("\n")
		if len(o.Card.Content) > 0 && string(o.Card.Content) != "null" {
			ew.printf("      content %s\n", inline(string(o.Card.Content)))
		}
	}
	for _, p := range t.Problems {
		ew.printf("problem: %s\n", p)
	}
}

func writeCall(ew *errWriter, c *Call) {
	when := c.CalledAt
	if when.IsZero() {
		when = c.FinishedAt
	}
	ew.printf("#%-4d %s  %s  %s", c.Seq, clock(when), c.ToolName, c.ToolCallID)
	if c.StepID != "" {
		ew.printf("  step %s", c.StepID)
	}
	if c.ParentStepID != "" {
		ew.printf(" (parent %s)", c.ParentStepID)
	}
	ew.printf("  epoch %d", c.TurnEpoch)
	if c.Dispatches > 1 {
		ew.printf("  dispatched %d×", c.Dispatches)
	}
	if c.HasMandate {
		ew.printf("  mandate")
	}
	ew.printf("\n")
	if c.CallCard != nil {
		ew.printf("      args    %s\n", inline(string(c.Arguments)))
	}
	if c.ResultCard == nil {
		ew.printf("      result  %s (no tool.result card yet)\n", c.Status)
		return
	}
	ew.printf("      result  %s · %s", c.Status, c.AfterExecution)
	if c.RecordedAfterExecution != "" && c.RecordedAfterExecution != c.AfterExecution {
		ew.printf(" (recorded %s, overridden by __cg_control)", c.RecordedAfterExecution)
	}
	if c.CallCard != nil {
		ew.printf(" · %s", c.Duration.Round(time.Microsecond))
	}
	ew.printf(" · epoch %d", c.ResultEpoch)
	if c.Worker != "" {
		ew.printf(" · by %s", c.Worker)
	}
	ew.printf("\n")
	if c.Error != nil {
		ew.printf("      error   %s: %s\n", c.Error.Code, inline(c.Error.Message))
	} else if len(c.Result) > 0 {
		ew.printf("      value   %s\n", inline(string(c.Result)))
	}
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, a ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, a...)
	}
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "--:--:--.---"
	}
	return t.UTC().Format("15:04:05.000")
}

// inline returns s on one line, cut to MaxInline bytes (on a rune
// boundary) with "…".
func inline(s string) string {
	if !oneLine(s) {
		s = strings.Join(strings.Fields(s), " ")
	}
	if len(s) <= MaxInline {
		return s
	}
	cut := MaxInline
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// oneLine reports whether strings.Join(strings.Fields(s), " ") is s: no
// white space but single inner ASCII spaces (non-ASCII bytes may be
// Unicode spaces: those strings take the long way).
func oneLine(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ' ':
			if i == 0 || i == len(s)-1 || s[i+1] == ' ' {
				return false
			}
		case c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r' || c >= utf8.RuneSelf:
			return false
		}
	}
	return true
}

func joinInts(v []int64) string {
	if len(v) == 0 {
		return "-"
	}
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ",")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// countsText renders status counts, success first, then alphabetically.
func countsText(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if (keys[i] == "success") != (keys[j] == "success") {
			return keys[i] == "success"
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return strings.Join(parts, ", ")
}

// WritePlan writes a replay plan: the calls that would run, in order.
func WritePlan(w io.Writer, p *Plan) error {
	ew := &errWriter{w: w}
	ew.printf("plan: replay turn %s as turn %s · project %s · %s", p.SourceTurnID, p.NewTurnID, p.ProjectID, plural(len(p.Steps), "call", "calls"))
	if len(p.Skipped) > 0 {
		ew.printf(" · %d skipped", len(p.Skipped))
	}
	ew.printf("\n")
	for _, s := range p.Steps {
		ew.printf("#%-4d %s  %s", s.Seq, s.ToolName, s.ToolCallID)
		if s.StepID != "" {
			ew.printf("  step %s", s.StepID)
		}
		ew.printf("  epoch %d", s.TurnEpoch)
		if s.TurnEpoch != s.OriginalEpoch {
			ew.printf(" (recorded %d)", s.OriginalEpoch)
		}
		if s.HasMandate {
			ew.printf("  mandate")
		}
		ew.printf("  recorded %s\n", s.Recorded.Status)
		ew.printf("      args    %s\n", inline(string(s.Arguments)))
	}
	for _, s := range p.Skipped {
		ew.printf("skipped %s: %s\n", s.ToolCallID, s.Reason)
	}
	return ew.err
}

// WriteReport writes a replay report: one line per call (equal,
// DIFFERENT or ERROR) and, under each different call, the changes.
func WriteReport(w io.Writer, r *Report) error {
	ew := &errWriter{w: w}
	p := r.Plan
	ew.printf("replay of turn %s as turn %s · project %s · agent %s\n", p.SourceTurnID, p.NewTurnID, p.ProjectID, r.AgentID)
	for _, c := range r.Calls {
		s := c.Step
		verdict := "equal"
		switch {
		case c.Error != "":
			verdict = "ERROR"
		case !c.Equal:
			verdict = "DIFFERENT"
		}
		ew.printf("#%-4d %-9s  %s  %s", s.Seq, verdict, s.ToolName, s.ToolCallID)
		if s.StepID != "" {
			ew.printf("  step %s", s.StepID)
		}
		if c.Replayed != nil {
			ew.printf("  %s → %s", s.Recorded.Status, c.Replayed.Status)
		}
		ew.printf("  %s\n", c.Duration.Round(time.Microsecond))
		if c.Error != "" {
			ew.printf("      error   %s\n", inline(c.Error))
		}
		for _, ch := range c.Changes {
			ew.printf("      %s\n", ch)
		}
	}
	for _, s := range p.Skipped {
		ew.printf("skipped %s: %s\n", s.ToolCallID, s.Reason)
	}
	ew.printf("%s replayed: %d equal, %d different, %d errors\n", plural(len(r.Calls), "call", "calls"), r.Equal, r.Different, r.Errors)
	return ew.err
}
