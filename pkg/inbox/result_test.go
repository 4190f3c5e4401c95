package inbox_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

func resultCards(target string) (result, call *card.Card) {
	cc, _ := json.Marshal(card.ToolCallContent{ToolName: "echo", Arguments: json.RawMessage(`{}`), TargetSubject: target})
	call = &card.Card{CardID: card.NewID(), ProjectID: "p", Type: card.TypeToolCall, AuthorID: "a", Content: cc,
		ToolCallID: "k", CreatedAt: time.Now(), Metadata: card.Metadata{AgentID: "a", AgentTurnID: "t", ToolCallID: "k"}}
	rc, _ := json.Marshal(card.ToolResultContent{Status: card.StatusSuccess, AfterExecution: card.Terminate, Result: json.RawMessage(`1`)})
	result = &card.Card{CardID: card.NewID(), ProjectID: "p", Type: card.TypeToolResult, AuthorID: "tool.echo", Content: rc,
		ToolCallID: "k", CreatedAt: time.Now(), Metadata: card.Metadata{AgentID: "a", AgentTurnID: "t", TurnEpoch: 2,
			ToolCallID: "k", StepID: "s1", FunctionName: "echo", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}}
	return result, call
}

// TestReportOfResult: the report a result card stands for is the
// worker's (channel from the call card's target subject), and a card that
// makes no report this inbox takes is refused naming why.
func TestReportOfResult(t *testing.T) {
	result, call := resultCards("cg.v1.p.main.cmd.tool.echo")
	rr, err := inbox.ReportOfResult("v1", result, call)
	if err != nil {
		t.Fatal(err)
	}
	want := utp.Report{ToolCallID: "k", AgentTurnID: "t", TurnEpoch: 2, AgentID: "a", ToolResultCardID: result.CardID,
		Status: card.StatusSuccess, AfterExecution: card.Terminate, StepID: "s1", ToolName: "echo"}
	if rr.ProjectID != "p" || rr.ChannelID != "main" || rr.Report != want {
		t.Fatalf("ReportOfResult = %+v, want project p, channel main, %+v", rr, want)
	}
	if utp.TraceID(rr.Traceparent) != result.Metadata.TraceID {
		t.Fatalf("traceparent %q does not continue trace %s", rr.Traceparent, result.Metadata.TraceID)
	}

	tests := []struct {
		name string
		edit func(result, call *card.Card) (*card.Card, *card.Card)
		want string
	}{
		{"no call card", func(r, _ *card.Card) (*card.Card, *card.Card) { return r, nil }, "tool.call card is not known"},
		{"not a result", func(_, c *card.Card) (*card.Card, *card.Card) { return c, c }, "not a tool.result"},
		{"bad target", func(r, c *card.Card) (*card.Card, *card.Card) {
			_, c2 := resultCards("not a subject")
			return r, c2
		}, "target_subject"},
		{"other version", func(r, c *card.Card) (*card.Card, *card.Card) {
			_, c2 := resultCards("cg.v9.p.main.cmd.tool.echo")
			return r, c2
		}, "not of version v1"},
		{"other project", func(r, c *card.Card) (*card.Card, *card.Card) {
			_, c2 := resultCards("cg.v1.q.main.cmd.tool.echo")
			return r, c2
		}, "project p"},
		{"no agent", func(r, c *card.Card) (*card.Card, *card.Card) {
			r2 := *r
			r2.Metadata.AgentID = ""
			return &r2, c
		}, "agent_id is required"},
		{"long step", func(r, c *card.Card) (*card.Card, *card.Card) {
			r2 := *r
			r2.Metadata.StepID = strings.Repeat("s", card.MaxIDLen+1)
			return &r2, c
		}, "step_id is longer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, c := tc.edit(resultCards("cg.v1.p.main.cmd.tool.echo"))
			_, err := inbox.ReportOfResult("v1", r, c)
			if !errors.Is(err, inbox.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

// TestReportOfResultTraceparent: the report carries the command's
// traceparent kept on the call card when it is well-formed and of the
// result's trace (the wakeup then carries it unchanged, as a worker's
// report would); otherwise the result's trace id with a span of its own.
func TestReportOfResultTraceparent(t *testing.T) {
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	cmd := "00-" + trace + "-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		name, kept string
		same       bool
	}{
		{"the command's", cmd, true},
		{"none kept", "", false},
		{"another trace", "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01", false},
		{"upper case", "00-" + strings.ToUpper(trace) + "-00f067aa0ba902b7-01", false},
		{"short span", "00-" + trace + "-00f067aa0ba902-01", false},
		{"not hex", "00-" + trace + "-00f067aa0ba902zz-01", false},
		{"other version", "01-" + trace + "-00f067aa0ba902b7-01", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			result, call := resultCards("cg.v1.p.main.cmd.tool.echo")
			if tc.kept != "" {
				raw, _ := json.Marshal(tc.kept)
				call.Metadata.Extra = map[string]json.RawMessage{card.ExtraTraceparent: raw}
			}
			rr, err := inbox.ReportOfResult("v1", result, call)
			if err != nil {
				t.Fatal(err)
			}
			if got := rr.Traceparent == tc.kept; got != tc.same {
				t.Fatalf("traceparent %q, kept %q: same = %v, want %v", rr.Traceparent, tc.kept, got, tc.same)
			}
			if utp.TraceID(rr.Traceparent) != trace || len(rr.Traceparent) != 55 {
				t.Fatalf("traceparent %q is not of trace %s", rr.Traceparent, trace)
			}
		})
	}
}
