package turn_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/turn"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// ids gives stable card ids for examples and tests.
func id(n int) string {
	return "00000000-0000-7000-8000-" + strings.Repeat("0", 12-len(itoa(n))) + itoa(n)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func callCard(n int, turnID, callID, tool, args, step string, epoch int64, at time.Duration) *card.Card {
	content, _ := json.Marshal(card.ToolCallContent{ToolName: tool, Arguments: json.RawMessage(args), TargetSubject: "cg.v1r3.demo.default.cmd.tool." + tool})
	return &card.Card{CardID: id(n), ProjectID: "demo", Type: card.TypeToolCall, Content: content, ToolCallID: callID, CreatedAt: t0.Add(at),
		Metadata: card.Metadata{AgentID: "agent-1", AgentTurnID: turnID, TurnEpoch: epoch, StepID: step, ToolCallID: callID}}
}

func resultCard(n int, turnID, callID, tool string, tr card.ToolResultContent, epoch int64, at time.Duration) *card.Card {
	content, _ := json.Marshal(tr)
	return &card.Card{CardID: id(n), ProjectID: "demo", Type: card.TypeToolResult, AuthorID: "worker-a", Content: content, ToolCallID: callID, CreatedAt: t0.Add(at),
		Metadata: card.Metadata{AgentID: "agent-1", AgentTurnID: turnID, TurnEpoch: epoch, ToolCallID: callID, FunctionName: tool}}
}

func ok(result string) card.ToolResultContent {
	return card.ToolResultContent{Status: card.StatusSuccess, AfterExecution: card.Suspend, Result: json.RawMessage(result)}
}

// sampleTurn is a turn with a successful call, a thought, a failed call, a
// call overridden to terminate at epoch 2, and a pending call.
func sampleTurn() []*card.Card {
	failed := card.NewResultContent(card.StatusFailed, card.Suspend, card.CodeBadRequest, "arguments: city is required", nil)
	thought := &card.Card{CardID: id(3), ProjectID: "demo", Type: card.TypeAgentThought, Content: json.RawMessage(`{"text":"need the weather too"}`),
		CreatedAt: t0.Add(10 * time.Millisecond), Metadata: card.Metadata{AgentID: "agent-1", AgentTurnID: "turn-1", TurnEpoch: 1, StepID: "s1"}}
	return []*card.Card{
		callCard(1, "turn-1", "call-1", "echo", `{"x":1}`, "s1", 1, 0),
		resultCard(2, "turn-1", "call-1", "echo", ok(`{"x":1}`), 1, 4*time.Millisecond),
		thought,
		callCard(4, "turn-1", "call-2", "weather", `{}`, "s2", 1, 20*time.Millisecond),
		resultCard(5, "turn-1", "call-2", "weather", failed, 1, 23*time.Millisecond),
		callCard(6, "turn-1", "call-3", "book", `{"id":7}`, "s3", 2, 30*time.Millisecond),
		resultCard(7, "turn-1", "call-3", "book", ok(`{"done":true,"__cg_control":{"after_execution":"terminate"}}`), 2, 80*time.Millisecond),
		callCard(8, "turn-1", "call-4", "echo", `{"y":2}`, "s3", 2, 90*time.Millisecond),
	}
}

func TestFromCards(t *testing.T) {
	tr := turn.FromCards("demo", "turn-1", sampleTurn())
	if tr.Cards != 8 || tr.AgentID != "agent-1" || len(tr.Calls) != 4 || len(tr.Others) != 1 || len(tr.Problems) != 0 {
		t.Fatalf("turn = %+v", tr)
	}
	if got := tr.Epochs; len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("epochs = %v", got)
	}
	type want struct {
		seq            int
		id, tool, step string
		status         string
		ae, recordedAE card.AfterExecution
		dur            time.Duration
		code           card.ErrorCode
		epoch, rEpoch  int64
	}
	for i, w := range []want{
		{1, "call-1", "echo", "s1", "success", card.Suspend, card.Suspend, 4 * time.Millisecond, "", 1, 1},
		{4, "call-2", "weather", "s2", "failed", card.Suspend, card.Suspend, 3 * time.Millisecond, card.CodeBadRequest, 1, 1},
		{6, "call-3", "book", "s3", "success", card.Terminate, card.Suspend, 50 * time.Millisecond, "", 2, 2},
		{8, "call-4", "echo", "s3", turn.StatusPending, "", "", 0, "", 2, 0},
	} {
		c := tr.Calls[i]
		code := card.ErrorCode("")
		if c.Error != nil {
			code = c.Error.Code
		}
		got := want{c.Seq, c.ToolCallID, c.ToolName, c.StepID, c.Status, c.AfterExecution, c.RecordedAfterExecution, c.Duration, code, c.TurnEpoch, c.ResultEpoch}
		if got != w {
			t.Errorf("call %d = %+v\nwant %+v", i, got, w)
		}
	}
	if tr.Counts["success"] != 2 || tr.Counts["failed"] != 1 || tr.Counts[turn.StatusPending] != 1 {
		t.Fatalf("counts = %v", tr.Counts)
	}
}

func TestFromCardsProblems(t *testing.T) {
	cards := []*card.Card{
		resultCard(1, "turn-1", "orphan", "echo", ok(`{}`), 1, 0),                       // result without call
		callCard(2, "turn-1", "call-1", "echo", `{}`, "s1", 1, time.Millisecond),        // call
		callCard(3, "turn-1", "call-1", "echo", `{}`, "s1", 1, 2*time.Millisecond),      // re-dispatch
		resultCard(4, "turn-1", "call-1", "echo", ok(`{"a":1}`), 1, 3*time.Millisecond), // result
		resultCard(5, "turn-1", "call-1", "echo", ok(`{"a":2}`), 1, 4*time.Millisecond), // second result
		callCard(6, "turn-2", "call-9", "echo", `{}`, "s1", 1, 0),                       // another turn
	}
	tr := turn.FromCards("demo", "turn-1", cards)
	if len(tr.Calls) != 2 || tr.Calls[0].ToolCallID != "orphan" || tr.Calls[1].Dispatches != 2 || string(tr.Calls[1].Result) != `{"a":1}` {
		t.Fatalf("calls = %+v", tr.Calls)
	}
	joined := strings.Join(tr.Problems, "\n")
	for _, want := range []string{"second tool.result card", "belongs to turn \"turn-2\"", "orphan has a tool.result card but no tool.call card"} {
		if !strings.Contains(joined, want) {
			t.Errorf("problems %q lack %q", joined, want)
		}
	}
	if tr.Cards != 5 {
		t.Fatalf("cards = %d, want 5 (the other turn's card is not counted)", tr.Cards)
	}
}

// A turn's timeline: calls with their results, other cards in between.
func ExampleWriteTimeline() {
	tr := turn.FromCards("demo", "turn-1", sampleTurn())
	_ = turn.WriteTimeline(os.Stdout, tr)
	// Output:
	// turn turn-1 · project demo · agent agent-1 · epochs 1,2 · 4 calls (2 success, 1 failed, 1 pending) · 8 cards
	// from 2025-06-01T12:00:00Z to 2025-06-01T12:00:00.09Z (90ms)
	// #1    12:00:00.000  echo  call-1  step s1  epoch 1
	//       args    {"x":1}
	//       result  success · suspend · 4ms · epoch 1 · by worker-a
	//       value   {"x":1}
	// #3    12:00:00.010  agent.thought  00000000-0000-7000-8000-000000000003  step s1
	//       content {"text":"need the weather too"}
	// #4    12:00:00.020  weather  call-2  step s2  epoch 1
	//       args    {}
	//       result  failed · suspend · 3ms · epoch 1 · by worker-a
	//       error   bad_request: arguments: city is required
	// #6    12:00:00.030  book  call-3  step s3  epoch 2
	//       args    {"id":7}
	//       result  success · terminate (recorded suspend, overridden by __cg_control) · 50ms · epoch 2 · by worker-a
	//       value   {"done":true,"__cg_control":{"after_execution":"terminate"}}
	// #8    12:00:00.090  echo  call-4  step s3  epoch 2
	//       args    {"y":2}
	//       result  pending (no tool.result card yet)
}
