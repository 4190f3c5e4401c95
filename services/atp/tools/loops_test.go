package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/atp/hem"
	"github.com/utpmesh/utpmesh/services/atp/internal/atptest"
	"github.com/utpmesh/utpmesh/services/atp/tools"
	"github.com/utpmesh/utpmesh/services/atp/windley"
	"github.com/utpmesh/utpmesh/subjects"
)

// waitFor is how long a test waits for an event before it fails (a
// failure guard, not a timing assertion).
const waitFor = 30 * time.Second

// TestStateEventsDriveRequery: an agent session bound to a booking runs
// its pre-session query, follows the booking's state events, and when
// another actor moves the booking PRE_JOURNEY -> JOURNEY the event (not a
// timer, not a poll) re-runs the query: one event, one more query, and
// atp_update_pre_arrangement, permitted in PRE_JOURNEY only, is no longer
// called — the loop refuses it without dispatching (MCP-D14, MCP-D15).
func TestStateEventsDriveRequery(t *testing.T) {
	h := atptest.Start(t, atptest.Options{})
	ctx := context.Background()
	b, err := h.Service.LoadFixture(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	// Every transition is on the booking's state-event subject with its
	// old and new state.
	pat, _ := subjects.StateEventPattern(subjects.DefaultVersion, atptest.Project, "atp", b.ID)
	raw, err := h.Mesh.Conn().SubscribeSync(pat)
	if err != nil {
		t.Fatal(err)
	}
	tok := h.Mandate("guest-agent", `permit(principal, action == ATPAction::"get_booking_status", resource);
permit(principal, action == ATPAction::"update_pre_arrangement", resource) when { context.booking_state == "PRE_JOURNEY" };`)
	guest := h.Agent("guest-agent", tok)
	const turn = "turn-follow"
	w := windley.NewLoop(guest.Client(), turn, "")
	requeried := make(chan windley.Requery, 4)
	stop, err := w.Follow(ctx, b.ID, func(r windley.Requery) { requeried <- r })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stop() }()
	st := atptest.Str(guest.OK(tools.ToolGetBookingStatus, map[string]any{"booking_object_id": b.ID}).Obj(), "state")
	if _, err := w.Start(ctx, &st); err != nil {
		t.Fatal(err)
	}
	if !w.Permits(tools.ToolUpdatePreArr, "") || w.Queries() != 1 {
		t.Fatalf("pre-session query in %s: permits %s = %v, queries %d", st, tools.ToolUpdatePreArr, w.Permits(tools.ToolUpdatePreArr, ""), w.Queries())
	}

	// Another actor (the operators' agent) moves the booking.
	ops := h.Agent("ops", h.Mandate("ops", atptest.AllTools()))
	ops.OK(tools.ToolBookingTransition, map[string]any{"booking_object_id": b.ID, "to": "JOURNEY", "reason": "guests arrived"})

	msg, err := raw.NextMsg(waitFor)
	if err != nil {
		t.Fatalf("no state event on %s: %v", pat, err)
	}
	ev, err := utp.DecodeStateEvent(msg.Data)
	if err != nil || ev.ResourceID != b.ID || ev.OldState != "PRE_JOURNEY" || ev.NewState != "JOURNEY" || ev.Actor != "agent:ops" ||
		!strings.HasPrefix(ev.EventID, b.ID+"/") || msg.Header.Get("Nats-Msg-Id") != ev.EventID {
		t.Fatalf("state event %s: %+v, %v", msg.Data, ev, err)
	}
	select {
	case r := <-requeried:
		if r.Err != nil || r.Event.NewState != "JOURNEY" || r.Residual == nil || r.Residual.State == nil || *r.Residual.State != "JOURNEY" {
			t.Fatalf("re-query on the event: %+v", r)
		}
	case <-time.After(waitFor):
		t.Fatal("the state event caused no re-query")
	}
	if w.Events() != 1 || w.Queries() != 2 {
		t.Fatalf("events %d, queries %d; want 1 event and 1 re-query", w.Events(), w.Queries())
	}
	if w.Permits(tools.ToolUpdatePreArr, "") {
		t.Fatal("after PRE_JOURNEY -> JOURNEY the loop still permits atp_update_pre_arrangement")
	}
	_, err = w.Call(ctx, agent.CallRequest{ToolName: tools.ToolUpdatePreArr, AgentTurnID: turn, ToolCallID: "forbidden",
		Arguments: json.RawMessage(`{"booking_object_id":"` + b.ID + `","participant_id":"p-aiko","field_key":"boot_size_eu","field_value":38,"source":"GUEST"}`)}, "")
	if !errors.Is(err, windley.ErrNotPermitted) {
		t.Fatalf("forbidden call = %v, want ErrNotPermitted", err)
	}
	cards, err := h.Mesh.Cards().ListTurn(ctx, cardstore.ListTurnRequest{ProjectID: atptest.Project, AgentTurnID: turn})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cards.Cards {
		if c.ToolCallID == "forbidden" {
			t.Fatalf("the forbidden call was dispatched: card %s", c.CardID)
		}
	}
	// The same state again (a second event for JOURNEY) re-queries nothing.
	if _, again, _ := w.BookingState(ctx, "JOURNEY"); again {
		t.Fatal("an unchanged state re-queried")
	}
}

// TestMandateExpansionLoop: the Windley loop finds a gap, escalates it
// with HEM-MANDATE-01, an agent identity cannot confirm it, the operator
// approves it with the parent mandate, and the agent receives the
// narrowed sub-mandate in its turn (its wakeup points at the card),
// re-queries and makes the call it needed. A request wider than the
// parent is refused and explained, and its task declined by the operator
// with a reason the agent reads.
func TestMandateExpansionLoop(t *testing.T) {
	h := atptest.Start(t, atptest.Options{ProjectPolicy: atptest.AllTools(hem.MandateGapID) + hemOperator})
	ctx := context.Background()
	b, err := h.Service.LoadFixture(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := h.Mesh.Auth().Keys.Ensure(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	// The parent: the guest's issuer's mandate, every ATP tool. The
	// guest's own: narrowed from it, bound to the booking, without
	// atp_update_pre_arrangement.
	parentTok := h.Mandate("guest-agent", atptest.AllTools(hem.MandateGapID))
	parent, err := mandate.Decode(parentTok)
	if err != nil {
		t.Fatal(err)
	}
	childTok, err := mandate.Narrow(key, parent, mandate.Claims{Subject: "guest-agent", Resource: &b.ID, Mandate: mandate.Grant{PolicySet: `permit(principal, action in [ATPAction::"get_booking_status", ATPAction::"get_context_package"], resource);
permit(principal, action == ATPAction::"invoke_hem", resource) when { ["HEM-MANDATE-01"].contains(context.hem_id) };`}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sub := wakeups(t, h, "guest-agent")
	guest := h.Agent("guest-agent", childTok)
	const turn = "turn-gap"
	w := windley.NewLoop(guest.Client(), turn, "")
	st := "PRE_JOURNEY"
	if _, err := w.Start(ctx, &st); err != nil {
		t.Fatal(err)
	}
	action := `ATPAction::"update_pre_arrangement"`
	gap, err := windley.NewMandateGap(w.Residual(), tools.ToolUpdatePreArr, action, "", "the guests' boot sizes must be recorded before the lesson")
	if err != nil {
		t.Fatal(err)
	}
	out, err := windley.EscalateMandateGap(ctx, guest.Client(), turn, "", gap)
	if err != nil || out.Result.Status != card.StatusSuccess {
		t.Fatalf("escalation: %+v, %v", out, err)
	}
	var pending struct {
		TaskID string `json:"task_id"`
		Status string `json:"status"`
	}
	_ = json.Unmarshal(out.Result.Result, &pending)
	if pending.Status != hem.StatusPending {
		t.Fatalf("escalation result %s", out.Result.Result)
	}
	ops := h.Operator("alice")
	list := ops.OK(tools.ToolHEMList, map[string]any{"status": "PENDING"}).Obj()
	token := atptest.Str(list, "tasks", 0, "human_confirmation_token")
	// The operator sees the structured request: the exact Cedar action
	// and the resource condition.
	if atptest.Str(list, "tasks", 0, "expansion", "missing_action") != action ||
		atptest.Str(list, "tasks", 0, "expansion", "resource_condition") != `resource == Booking::"`+b.ID+`"` {
		t.Fatalf("the operator's listing lacks the structured request: %v", list)
	}

	t.Run("an agent identity cannot confirm", func(t *testing.T) {
		self := h.Agent("guest-agent", h.Mandate("guest-agent", atptest.AllTools(hem.MandateGapID)+hemOperator))
		self.Fail(tools.ToolHEMConfirm, map[string]any{"task_id": pending.TaskID, "human_confirmation_token": token, "parent_mandate": parentTok}, card.CodeAuthFailed)
	})
	t.Run("confirming needs the parent mandate, and only the agent's", func(t *testing.T) {
		if e := ops.Fail(tools.ToolHEMConfirm, map[string]any{"task_id": pending.TaskID, "human_confirmation_token": token}, card.CodeBadRequest); !strings.Contains(e.Message, "parent_mandate") {
			t.Fatalf("no parent: %s", e.Message)
		}
		other := h.Mandate("someone-else", atptest.AllTools(hem.MandateGapID))
		if e := ops.Fail(tools.ToolHEMConfirm, map[string]any{"task_id": pending.TaskID, "human_confirmation_token": token, "parent_mandate": other}, card.CodeBadRequest); !strings.Contains(e.Message, "not the parent") {
			t.Fatalf("another mandate as parent: %s", e.Message)
		}
	})

	done := ops.OK(tools.ToolHEMConfirm, map[string]any{"task_id": pending.TaskID, "human_confirmation_token": token, "parent_mandate": parentTok}).Obj()
	if done["status"] != hem.StatusComplete || done["confirmed_by"] != "operator" || done["operator"] != "alice" || done["mandate_jti"] == "" || done["mandate"] != nil {
		t.Fatalf("confirm = %v (the operator's result names the sub-mandate, never carries it)", done)
	}
	// The agent's wakeup points at its resolution, which carries the
	// sub-mandate.
	woke := resolution(t, h, sub, turn, out.Call.ToolCallID)
	if woke["status"] != hem.StatusComplete || woke["operator"] != "alice" || woke["mandate_jti"] != done["mandate_jti"] {
		t.Fatalf("resolution = %v", woke)
	}
	res, err := windley.ReadResolution(ctx, guest.Client(), turn, out.Call.ToolCallID)
	if err != nil || res.Mandate == "" {
		t.Fatalf("ReadResolution = %+v, %v", res, err)
	}
	granted, err := (&mandate.Verifier{Keys: mandate.StaticKeys{key}}).Verify(ctx, res.Mandate, key.Issuer)
	if err != nil {
		t.Fatalf("the sub-mandate does not verify: %v", err)
	}
	if err := mandate.CheckNarrowing(parent, granted); err != nil || granted.Claims.BoundResource() != b.ID || granted.Claims.Subject != "guest-agent" {
		t.Fatalf("sub-mandate %+v: narrowing %v", granted.Claims, err)
	}
	// The event log records the issue (its jti and policy), never the token.
	evs, _ := h.Service.Store().Events(ctx, atptest.Project, b.ID, 0, 0, true)
	last := evs[len(evs)-1]
	if last.Type != booking.EventHEMResolved || last.Actor != "operator:alice" || !strings.Contains(string(last.Data), `"mandate_issued"`) ||
		!strings.Contains(string(last.Data), granted.Claims.JTI) || strings.Contains(string(last.Data), res.Mandate) {
		t.Fatalf("HEM_RESOLVED = %+v %s", last, last.Data)
	}
	// Re-query with the new mandate, and the call the agent needed succeeds.
	if _, err := w.Resolved(ctx, res, ""); err != nil {
		t.Fatal(err)
	}
	if !w.Permits(tools.ToolUpdatePreArr, "") {
		t.Fatalf("the new mandate's residual does not permit %s: %+v", tools.ToolUpdatePreArr, w.Residual())
	}
	upd, err := w.Call(ctx, agent.CallRequest{ToolName: tools.ToolUpdatePreArr, AgentTurnID: turn,
		Arguments: json.RawMessage(`{"booking_object_id":"` + b.ID + `","participant_id":"p-aiko","field_key":"boot_size_eu","field_value":38,"source":"GUEST"}`)}, "")
	if err != nil || upd.Result.Status != card.StatusSuccess {
		t.Fatalf("the call the agent needed: %+v, %v", upd, err)
	}

	t.Run("a request wider than the parent is refused, then declined", func(t *testing.T) {
		wide := windley.MandateGap{MissingAction: `ATPAdminAction::"hem_confirm"`, ToolName: tools.ToolHEMConfirm, BookingObjectID: &b.ID,
			ResourceCondition: `resource == Booking::"` + b.ID + `"`, AgentAssessment: "I want to confirm my own escalations"}
		out, err := windley.EscalateMandateGap(ctx, guest.Client(), turn, res.Mandate, &wide)
		if err != nil || out.Result.Status != card.StatusSuccess {
			t.Fatalf("escalation: %+v, %v", out, err)
		}
		_ = json.Unmarshal(out.Result.Result, &pending)
		task, err := h.Service.HEM().Get(ctx, atptest.Project, pending.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		// The agent now holds the sub-mandate, whose parent is parentTok.
		e := ops.Fail(tools.ToolHEMConfirm, map[string]any{"task_id": task.TaskID, "human_confirmation_token": task.Token, "parent_mandate": parentTok}, card.CodeBadRequest)
		if !strings.Contains(e.Message, "wider than the parent") || !strings.Contains(e.Message, `ATPAdminAction::"hem_confirm"`) {
			t.Fatalf("too wide: %s", e.Message)
		}
		if st, _ := h.Service.HEM().Get(ctx, atptest.Project, task.TaskID); st.Status != hem.StatusPending {
			t.Fatalf("a refused approval changed the task: %s", st.Status)
		}
		dec := ops.OK(tools.ToolHEMDecline, map[string]any{"task_id": task.TaskID, "reason": "no agent decides HEM tasks"}).Obj()
		if dec["declined_by"] != "operator" || dec["operator"] != "alice" || dec["reason"] != "no agent decides HEM tasks" {
			t.Fatalf("decline = %v", dec)
		}
		r := resolution(t, h, sub, turn, out.Call.ToolCallID)
		if r["status"] != hem.StatusDeclined || r["declined_by"] != "operator" || r["reason"] != "no agent decides HEM tasks" || r["mandate"] != nil {
			t.Fatalf("declined resolution = %v", r)
		}
	})
}
