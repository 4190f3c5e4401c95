package turn

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
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

// writeCall writes one call: the timeline's bulk, so it appends to a
// scratch buffer instead of formatting with fmt (TestWriteCallFormat holds
// it to the fmt-based version).
func writeCall(ew *errWriter, c *Call) {
	when := c.CalledAt
	if when.IsZero() {
		when = c.FinishedAt
	}
	b := append(ew.buf[:0], '#')
	n := len(b)
	b = strconv.AppendInt(b, int64(c.Seq), 10)
	for len(b)-n < 4 { // %-4d
		b = append(b, ' ')
	}
	b = append(b, ' ')
	b = appendClock(b, when)
	b = append(append(append(append(b, "  "...), c.ToolName...), "  "...), c.ToolCallID...)
	if c.StepID != "" {
		b = append(append(b, "  step "...), c.StepID...)
	}
	if c.ParentStepID != "" {
		b = append(append(append(b, " (parent "...), c.ParentStepID...), ')')
	}
	b = strconv.AppendInt(append(b, "  epoch "...), c.TurnEpoch, 10)
	if c.Dispatches > 1 {
		b = append(strconv.AppendInt(append(b, "  dispatched "...), int64(c.Dispatches), 10), "×"...)
	}
	if c.HasMandate {
		b = append(b, "  mandate"...)
	}
	b = append(b, '\n')
	if c.CallCard != nil {
		b = append(append(append(b, "      args    "...), inline(string(c.Arguments))...), '\n')
	}
	if c.ResultCard == nil {
		b = append(append(append(b, "      result  "...), c.Status...), " (no tool.result card yet)\n"...)
		ew.write(b)
		return
	}
	b = append(append(append(append(b, "      result  "...), c.Status...), " · "...), c.AfterExecution...)
	if c.RecordedAfterExecution != "" && c.RecordedAfterExecution != c.AfterExecution {
		b = append(append(append(b, " (recorded "...), c.RecordedAfterExecution...), ", overridden by __cg_control)"...)
	}
	if c.CallCard != nil {
		b = append(append(b, " · "...), c.Duration.Round(time.Microsecond).String()...)
	}
	b = strconv.AppendInt(append(b, " · epoch "...), c.ResultEpoch, 10)
	if c.Worker != "" {
		b = append(append(b, " · by "...), c.Worker...)
	}
	b = append(b, '\n')
	if c.Error != nil {
		b = append(append(append(append(append(b, "      error   "...), c.Error.Code...), ": "...), inline(c.Error.Message)...), '\n')
	} else if len(c.Result) > 0 {
		b = append(append(append(b, "      value   "...), inline(string(c.Result))...), '\n')
	}
	ew.write(b)
}

// appendClock appends clock(t) without allocating.
func appendClock(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, "--:--:--.---"...)
	}
	return t.UTC().AppendFormat(b, "15:04:05.000")
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
	buf []byte // writeCall's scratch line buffer
}

// write writes b unless a write failed before; ew keeps b for reuse.
func (e *errWriter) write(b []byte) {
	e.buf = b
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
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
