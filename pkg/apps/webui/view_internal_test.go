package webui

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/confirm"
	"github.com/utpmesh/utpmesh/pkg/turn"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func callCard(n int, callID, tool string, at time.Duration) *card.Card {
	content, _ := json.Marshal(card.ToolCallContent{ToolName: tool, Arguments: json.RawMessage(`{}`), TargetSubject: "cg.v1r3.demo.default.cmd.tool." + tool})
	return &card.Card{CardID: fmt.Sprintf("c%d", n), ProjectID: "demo", Type: card.TypeToolCall, Content: content, ToolCallID: callID,
		CreatedAt: t0.Add(at), Metadata: card.Metadata{AgentID: "a", AgentTurnID: "t", ToolCallID: callID}}
}

func resultCard(n int, callID string, status card.Status, result string, at time.Duration) *card.Card {
	content, _ := json.Marshal(card.ToolResultContent{Status: status, AfterExecution: card.Suspend, Result: json.RawMessage(result)})
	if status != card.StatusSuccess {
		content, _ = json.Marshal(card.NewResultContent(status, card.Suspend, card.CodeBadRequest, "no", nil))
	}
	return &card.Card{CardID: fmt.Sprintf("c%d", n), ProjectID: "demo", Type: card.TypeToolResult, Content: content, ToolCallID: callID,
		CreatedAt: t0.Add(at), Metadata: card.Metadata{AgentID: "a", AgentTurnID: "t", ToolCallID: callID}}
}

// transitionCard is a resolution record (confirm.Resolution under
// "transition") in a card of a type the UI does not know.
func transitionCard(n int, callID, confirmationID, to string, at time.Duration) *card.Card {
	rec := map[string]any{"kind": "transition", "transition": confirm.Resolution{ConfirmationID: confirmationID, ToolCallID: callID,
		From: confirm.StatusPending, To: to, ByToolCallID: "by", ByAgentTurnID: "ui-1", AtUTC: "x"}}
	content, _ := json.Marshal(rec)
	return &card.Card{CardID: fmt.Sprintf("c%d", n), ProjectID: "demo", Type: "any.catalogue.record", Content: content, ToolCallID: callID,
		CreatedAt: t0.Add(at), Metadata: card.Metadata{AgentID: "a", AgentTurnID: "t", ToolCallID: callID}}
}

// parked is a pending result in ATLAS's shape (default resolvers);
// parkedOwn one that names its own.
const (
	parked    = `{"status":"PENDING_CONFIRM","confirmation_id":"hold_%s","tool_name":"CALENDAR_CREATE_BLOCKS","would":{},"expires_at":"%s"}`
	parkedOwn = `{"status":"PENDING_CONFIRM","confirmation_id":"hold_%s","tool_name":"book","would":{},"expires_at":"%s","confirm_tool":"book_yes","cancel_tool":"book_no"}`
)

// TestLayout: bars run from the tool.call card's created_at to the
// tool.result card's, in percent of the turn; a call that starts after
// the previous ones ended gets a wait; a pending call runs until now;
// parked calls (package confirm) are confirmations, resolved by
// resolution records.
func TestLayout(t *testing.T) {
	ms := time.Millisecond
	later := t0.Add(time.Hour).Format(time.RFC3339)
	cards := []*card.Card{
		callCard(1, "a", "echo", 0), resultCard(2, "a", card.StatusSuccess, `{}`, 20*ms), // 0–20
		callCard(3, "b", "fail", 10*ms), resultCard(4, "b", card.StatusFailed, ``, 30*ms), // 10–30, overlaps a
		callCard(5, "c", "CAL", 50*ms), resultCard(6, "c", card.StatusSuccess, fmt.Sprintf(parked, "1", later), 60*ms), // wait 20
		callCard(7, "d", "CAL", 60*ms), resultCard(8, "d", card.StatusSuccess, fmt.Sprintf(parked, "2", later), 70*ms),
		transitionCard(9, "d", "hold_2", confirm.StatusOK, 75*ms),
		transitionCard(13, "c", "hold_other", confirm.StatusOK, 76*ms), // another confirmation: c stays pending
		callCard(10, "e", "book", 70*ms), resultCard(11, "e", card.StatusSuccess, fmt.Sprintf(parkedOwn, "3", t0.Format(time.RFC3339)), 80*ms),
		callCard(12, "f", "slow", 80*ms), // pending
	}
	tr := turn.FromCards("demo", "t", cards)
	v := layout(tr, t0.Add(100*ms))
	if v.Span != 100*ms || !v.Start.Equal(t0) {
		t.Fatalf("span %v from %v, want 100ms from t0", v.Span, v.Start)
	}
	want := []struct {
		class       string
		left, width float64
		wait        time.Duration
		running     bool
		state       string
	}{
		{"success", 0, 20, 0, false, ""},
		{"failed", 10, 20, 0, false, ""},
		{"confirm", 50, 10, 20 * ms, false, "pending"},
		{"success", 60, 10, 0, false, confirm.StatusOK},
		{"success", 70, 10, 0, false, "expired"},
		{"pending", 80, 20, 0, true, ""},
	}
	if len(v.Rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(v.Rows), len(want))
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for i, w := range want {
		r := v.Rows[i]
		state := ""
		if r.Confirmation != nil {
			state = r.Confirmation.State
		}
		if r.Class != w.class || !near(r.Left, w.left) || !near(r.Width, w.width) || r.Wait != w.wait || r.Running != w.running || state != w.state {
			t.Errorf("row %d (%s): class %s left %.1f width %.1f wait %v running %v state %q; want %+v",
				i, r.Call.ToolCallID, r.Class, r.Left, r.Width, r.Wait, r.Running, state, w)
		}
	}
	if r := v.Rows[2]; !near(r.WaitLeft, 30) || !near(r.WaitWidth, 20) {
		t.Errorf("wait of c at %.1f%% for %.1f%%, want 30%% for 20%%", r.WaitLeft, r.WaitWidth)
	}
	if len(v.Confirmations) != 3 || v.Replayable != 6 || v.ReplaySkipped != 0 {
		t.Errorf("%d confirmations, %d replayable, %d skipped; want 3, 6, 0", len(v.Confirmations), v.Replayable, v.ReplaySkipped)
	}
	for i, w := range [][2]string{2: {confirm.DefaultConfirmTool, confirm.DefaultCancelTool}, 4: {"book_yes", "book_no"}} {
		if cf := v.Rows[i].Confirmation; w[0] != "" && (cf == nil || cf.ConfirmTool != w[0] || cf.CancelTool != w[1]) {
			t.Errorf("row %d resolvers: %+v, want %v", i, cf, w)
		}
	}
	if v.Rows[0].CallJSON == "" || v.Rows[5].ResultJSON != "" {
		t.Errorf("cards: call JSON %q, pending result JSON %q", v.Rows[0].CallJSON, v.Rows[5].ResultJSON)
	}
}

// TestLayoutInstant: a turn whose calls take no time still draws visible
// bars inside the track.
func TestLayoutInstant(t *testing.T) {
	tr := turn.FromCards("demo", "t", []*card.Card{callCard(1, "a", "echo", 0), resultCard(2, "a", card.StatusSuccess, `{}`, 0)})
	v := layout(tr, t0)
	if r := v.Rows[0]; r.Width != minBar || r.Left != 0 {
		t.Fatalf("instant call: left %v width %v, want 0 and %v", r.Left, r.Width, minBar)
	}
}
