package turn

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// TestInline: the one-line check that spares most values strings.Fields
// gives inline the same result as always taking the long way.
func TestInline(t *testing.T) {
	long := strings.Repeat("é", MaxInline)
	for _, s := range []string{
		"", "x", `{"x":1}`, "a b", "a  b", " a", "a ", "a\tb", "a\nb", "a\r\nb", "a\vb\fc",
		"a\u00a0b", "a\u0085b", "a\u2003b", "caf\xe9 x", "é è", long, long + " x",
	} {
		want := strings.Join(strings.Fields(s), " ")
		if len(want) > MaxInline {
			want = inlineSlow(want)
		}
		if got := inline(s); got != want {
			t.Errorf("inline(%q) = %q, want %q", s, got, want)
		}
	}
}

// inlineSlow cuts like inline, for the expected values.
func inlineSlow(s string) string {
	cut := MaxInline
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// TestWriteCallFormat: writeCall appends its lines by hand; it must write
// exactly what the fmt version below (the one it replaced) writes, for
// every branch of the layout.
func TestWriteCallFormat(t *testing.T) {
	at := time.Date(2026, 11, 23, 7, 0, 0, 123456789, time.FixedZone("X", 3600))
	cd := &card.Card{}
	var calls []Call
	for _, seq := range []int{1, 42, 9999, 123456} {
		for _, called := range []bool{true, false} {
			for _, result := range []int{0, 1, 2, 3} { // none, success, error, override
				for _, extras := range []bool{false, true} {
					c := Call{Seq: seq, ToolCallID: "call-1", ToolName: "weather.get", TurnEpoch: int64(seq % 3), Status: StatusPending, Dispatches: 1}
					if called {
						c.CallCard, c.CalledAt, c.Arguments = cd, at, json.RawMessage(`{"city":"Oslo",  "note":"a\tb"}`)
					}
					if extras {
						c.StepID, c.ParentStepID, c.Dispatches, c.HasMandate, c.Worker = "s1", "s0", 3, true, "worker-1"
					}
					if result > 0 {
						c.ResultCard, c.FinishedAt, c.ResultEpoch = cd, at.Add(3*time.Millisecond+1500*time.Nanosecond), 2
						c.Duration = c.FinishedAt.Sub(c.CalledAt)
						c.Status, c.AfterExecution, c.RecordedAfterExecution = "success", card.Suspend, card.Suspend
						c.Result = json.RawMessage(`{"forecast":[12,14,11]}`)
					}
					switch result {
					case 2:
						c.Status, c.Error = "failed", &card.Error{Code: card.CodeBadRequest, Message: "city:\n is required " + strings.Repeat("é", 100)}
					case 3:
						c.AfterExecution, c.Result = card.Terminate, nil
					}
					calls = append(calls, c)
				}
			}
		}
	}
	for i := range calls {
		var got, want strings.Builder
		writeCall(&errWriter{w: &got}, &calls[i])
		writeCallFmt(&errWriter{w: &want}, &calls[i])
		if got.String() != want.String() {
			t.Errorf("call %d:\n got %q\nwant %q", i, got.String(), want.String())
		}
	}
}

// writeCallFmt is writeCall as it was written with fmt: the reference.
func writeCallFmt(ew *errWriter, c *Call) {
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
