package tools_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/atp/hem"
	"github.com/utpmesh/utpmesh/services/atp/internal/atptest"
	"github.com/utpmesh/utpmesh/services/atp/tools"
)

// wakeups subscribes to an agent's wakeups before anything is resolved.
func wakeups(t *testing.T, h *atptest.Harness, agentID string) *nats.Subscription {
	t.Helper()
	sub, err := h.Mesh.Conn().SubscribeSync("cg.v1r3.demo.*.cmd.agent." + agentID + ".wakeup")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return sub
}

// resolution waits for the wakeup of a task's resolution and returns the
// result it points at.
func resolution(t *testing.T, h *atptest.Harness, sub *nats.Subscription, turn, invokeCallID string) map[string]any {
	t.Helper()
	want := tools.ResultCallID(invokeCallID)
	for {
		msg, err := sub.NextMsg(20 * time.Second)
		if err != nil {
			t.Fatalf("no wakeup for %s: %v", want, err)
		}
		var w utp.Wakeup
		if err := json.Unmarshal(msg.Data, &w); err != nil {
			t.Fatal(err)
		}
		if w.ToolCallID != want || w.AgentTurnID != turn {
			continue
		}
		res, err := h.Mesh.Cards().Get(context.Background(), atptest.Project, w.ToolResultCardID)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := res.ToolResult()
		if err != nil || tr.Status != card.StatusSuccess {
			t.Fatalf("resolution result %+v, %v", tr, err)
		}
		var out map[string]any
		if err := json.Unmarshal(tr.Result, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
}

func invokeArgs(bookingID, hemID, trigger string) map[string]any {
	return map[string]any{"booking_object_id": bookingID, "hem_id": hemID,
		"context": map[string]any{"trigger_reason": trigger, "agent_assessment": "need get_context_package on this booking", "recommended_action": "expand the mandate"}}
}

const hemOperator = "\npermit(principal, action in [ATPAdminAction::\"hem_list\", ATPAdminAction::\"hem_confirm\", ATPAdminAction::\"hem_decline\"], resource);"

func TestHEMConfirmAndDecline(t *testing.T) {
	h := atptest.Start(t, atptest.Options{ProjectPolicy: atptest.AllTools(hem.MandateGapID, "HEM-99", "HEM-07") + hemOperator})
	ctx := context.Background()
	b, err := h.Service.LoadFixture(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	ag := h.Agent("guest-agent", h.Mandate("guest-agent", atptest.AllTools(hem.MandateGapID, "HEM-99")))
	ops := h.Agent("ops", h.Mandate("ops", atptest.AllTools()+hemOperator))
	alice := h.Operator("alice")
	sub := wakeups(t, h, "guest-agent")

	t.Run("bad invocations", func(t *testing.T) {
		if e := ag.Fail(tools.ToolInvokeHEM, invokeArgs(b.ID, "HEM-99", "WEATHER"), card.CodeBadRequest); !strings.Contains(e.Message, "HEM-MANDATE-01") {
			t.Fatalf("unknown hem: %s", e.Message)
		}
		if e := ag.Fail(tools.ToolInvokeHEM, invokeArgs(b.ID, hem.MandateGapID, "WEATHER"), card.CodeBadRequest); !strings.Contains(e.Message, "MANDATE_GAP_DETECTED") {
			t.Fatalf("wrong trigger: %s", e.Message)
		}
		// The mandate does not enumerate HEM-07: the gate refuses it.
		ag.Fail(tools.ToolInvokeHEM, invokeArgs(b.ID, "HEM-07", hem.TriggerMandateGap), card.CodeAuthFailed)
	})

	var turn, callID, taskID string
	t.Run("pending blocks the booking", func(t *testing.T) {
		r := ag.OK(tools.ToolInvokeHEM, invokeArgs(b.ID, hem.MandateGapID, hem.TriggerMandateGap))
		out := r.Obj()
		turn, callID, taskID = r.Turn, r.ToolCallID, atptest.Str(out, "task_id")
		if out["status"] != "PENDING" || out["confirmation_required"] != true || out["elicitation_sent_to"] != "operator" || !strings.HasPrefix(taskID, "hem_") ||
			out["result_tool_call_id"] != tools.ResultCallID(callID) {
			t.Fatalf("invoke = %v", out)
		}
		if _, ok := out["human_confirmation_token"]; ok {
			t.Fatal("the agent must not see the operator's token")
		}
		ops.Fail(tools.ToolBookingTransition, map[string]any{"booking_object_id": b.ID, "to": "JOURNEY"}, tools.CodeHEMActive)
		st := ag.OK(tools.ToolGetBookingStatus, map[string]any{"booking_object_id": b.ID}).Obj()
		if atptest.Str(st, "pending_hem_tasks", 0, "task_id") != taskID || atptest.Str(st, "pending_hem_tasks", 0, "status") != "PENDING" {
			t.Fatalf("status = %v", st)
		}
	})

	t.Run("agents cannot decide a HEM, whatever their mandate", func(t *testing.T) {
		// ops's mandate and the project policy permit the operator's
		// tools; the mesh's admission still refuses an agent's call of an
		// operator-only tool (the tools' own check of the principal, the
		// defence in depth, is run in process by the subtest below that
		// calls the handler with forged principals).
		for _, tc := range []struct {
			who  *atptest.Agent
			tool string
			args map[string]any
		}{
			{ops, tools.ToolHEMList, map[string]any{"status": "PENDING"}},
			{ops, tools.ToolHEMConfirm, map[string]any{"task_id": taskID}},
			{ops, tools.ToolHEMDecline, map[string]any{"task_id": taskID, "reason": "no"}},
		} {
			e := tc.who.Fail(tc.tool, tc.args, card.CodeAuthFailed)
			if !strings.Contains(e.Message, "operator only") || !strings.Contains(e.Message, tc.tool) {
				t.Fatalf("%s by an agent: %s", tc.tool, e.Message)
			}
		}
		// The agent that invoked the HEM cannot approve its own escalation
		// either (issue 23: the demo agent did).
		self := h.Agent("guest-agent", h.Mandate("guest-agent", atptest.AllTools(hem.MandateGapID, "HEM-99")+hemOperator))
		self.Fail(tools.ToolHEMDecline, map[string]any{"task_id": taskID, "reason": "mine"}, card.CodeAuthFailed)
		if got, _ := h.Service.HEM().Get(ctx, atptest.Project, taskID); got.Status != hem.StatusPending {
			t.Fatalf("after the agents' attempts: %s", got.Status)
		}
	})

	t.Run("an operator principal counts only with the mesh's admission", func(t *testing.T) {
		var decline worker.Tool
		all, err := h.Service.Tools()
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range all {
			if tl.Name == tools.ToolHEMDecline {
				decline = tl
			}
		}
		args := json.RawMessage(`{"task_id":"` + taskID + `","reason":"forged"}`)
		for _, tc := range []struct {
			name      string
			principal string
			admission *utp.Admission
		}{
			{"no principal, no admission", "", nil},
			{"operator principal without an admission", "operator:mallory", nil},
			{"admission of an agent", "operator:mallory", &utp.Admission{Principal: "agent:ops"}},
			{"agent principal", "agent:ops", &utp.Admission{Principal: "agent:ops"}},
			{"operator without a name", "operator:", &utp.Admission{Principal: "operator:"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := decline.Handler(ctx, &worker.Call{Version: "v1r3", ProjectID: atptest.Project, ChannelID: "main", ToolName: tools.ToolHEMDecline,
					Command: utp.Command{AgentID: "ops", AgentTurnID: "turn-forged", ToolCallID: "c1"}, Arguments: args, Principal: tc.principal, Admission: tc.admission})
				var ce *card.Error
				if !errors.As(err, &ce) || ce.Code != card.CodeAuthFailed {
					t.Fatalf("decline = %v, want auth_failed", err)
				}
			})
		}
	})

	t.Run("the registry marks them operator-only", func(t *testing.T) {
		all, err := h.Service.Tools()
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range all {
			want := ""
			if tl.Name == tools.ToolHEMList || tl.Name == tools.ToolHEMConfirm || tl.Name == tools.ToolHEMDecline {
				want = registry.PrincipalOperator
			}
			if tl.Options.Principal != want {
				t.Errorf("%s: options.principal %q, want %q", tl.Name, tl.Options.Principal, want)
			}
		}
	})

	t.Run("confirm needs the token, then completes and wakes the agent", func(t *testing.T) {
		list := alice.OK(tools.ToolHEMList, map[string]any{"status": "PENDING"}).Obj()
		token := atptest.Str(list, "tasks", 0, "human_confirmation_token")
		if atptest.Str(list, "tasks", 0, "task_id") != taskID || token == "" {
			t.Fatalf("list = %v", list)
		}
		if e := alice.Fail(tools.ToolHEMConfirm, map[string]any{"task_id": taskID}, card.CodeBadRequest); !strings.Contains(e.Message, "human_confirmation_token") {
			t.Fatalf("no token: %s", e.Message)
		}
		done := alice.OK(tools.ToolHEMConfirm, map[string]any{"task_id": taskID, "human_confirmation_token": token, "note": "sub-mandate issued"}).Obj()
		if done["status"] != "COMPLETE" || done["hem_outcome"] != "MANDATE_EXPANSION_APPROVED" || !strings.HasPrefix(atptest.Str(done, "decision_object_id"), "dec_") ||
			len(done["event_log_entries"].([]any)) != 2 || done["confirmed_by"] != "operator" {
			t.Fatalf("confirm = %v", done)
		}
		evs, _ := h.Service.Store().Events(ctx, atptest.Project, b.ID, 0, 0, false)
		if last := evs[len(evs)-1]; last.Type != booking.EventHEMResolved || last.Actor != "operator:alice" || !strings.Contains(string(last.Data), `"operator":"alice"`) {
			t.Fatalf("HEM_RESOLVED event = %+v (%s)", last, last.Data)
		}
		woke := resolution(t, h, sub, turn, callID)
		if woke["status"] != "COMPLETE" || woke["task_id"] != taskID || woke["decision_object_id"] != done["decision_object_id"] {
			t.Fatalf("wakeup result = %v", woke)
		}
		// The original call still has its one PENDING result.
		res, err := h.Mesh.Cards().FindToolResult(ctx, atptest.Project, turn, callID)
		if err != nil {
			t.Fatal(err)
		}
		if tr, _ := res.ToolResult(); !strings.Contains(string(tr.Result), `"status":"PENDING"`) {
			t.Fatalf("original result = %s", tr.Result)
		}
		alice.Fail(tools.ToolHEMDecline, map[string]any{"task_id": taskID, "reason": "late"}, card.CodeBadRequest)
		st := ag.OK(tools.ToolGetBookingStatus, map[string]any{"booking_object_id": b.ID}).Obj()
		if len(st["pending_hem_tasks"].([]any)) != 0 || atptest.Str(st, "hem_tasks", 0, "status") != "COMPLETE" {
			t.Fatalf("status after = %v", st)
		}
		ops.OK(tools.ToolBookingTransition, map[string]any{"booking_object_id": b.ID, "to": "JOURNEY"})
		// An agent's admin call is logged as the agent's, never as an operator's.
		evs, _ = h.Service.Store().Events(ctx, atptest.Project, b.ID, 0, 0, false)
		if last := evs[len(evs)-1]; last.Type != booking.EventTransition || last.Actor != "agent:ops" {
			t.Fatalf("transition event = %+v", last)
		}
	})

	t.Run("decline", func(t *testing.T) {
		r := ag.OK(tools.ToolInvokeHEM, invokeArgs(b.ID, hem.MandateGapID, hem.TriggerMandateGap))
		id := atptest.Str(r.Obj(), "task_id")
		alice.Fail(tools.ToolHEMDecline, map[string]any{"task_id": id, "reason": " "}, card.CodeBadRequest)
		out := alice.OK(tools.ToolHEMDecline, map[string]any{"task_id": id, "reason": "not for this guest"}).Obj()
		if out["status"] != "DECLINED" || out["declined_by"] != "operator" || out["reason"] != "not for this guest" {
			t.Fatalf("decline = %v", out)
		}
		if woke := resolution(t, h, sub, r.Turn, r.ToolCallID); woke["status"] != "DECLINED" {
			t.Fatalf("wakeup = %v", woke)
		}
		evs, _ := h.Service.Store().Events(ctx, atptest.Project, b.ID, 0, 0, false)
		last := evs[len(evs)-1]
		if last.Type != booking.EventHEMResolved || !strings.Contains(string(last.Data), `"status":"DECLINED"`) || last.Actor != "operator:alice" ||
			!strings.Contains(string(last.Data), `"operator":"alice"`) || strings.Contains(string(last.Data), "guest-agent") {
			t.Fatalf("last event = %+v", last)
		}
	})
}

// TestHEMDeadlineAcrossRestart: a task invoked before a restart takes its
// secondary path when the deadline passes after it, and the agent is woken.
func TestHEMDeadlineAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	clock := atptest.NewClock(time.Date(2027, 1, 10, 9, 0, 0, 0, time.UTC))
	h := atptest.StartIn(t, dir, atptest.Options{Clock: clock})
	ctx := context.Background()
	b, err := h.Service.LoadFixture(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	tok := h.Mandate("guest-agent", atptest.AllTools(hem.MandateGapID))
	r := h.Agent("guest-agent", tok).OK(tools.ToolInvokeHEM, invokeArgs(b.ID, hem.MandateGapID, hem.TriggerMandateGap))
	taskID := atptest.Str(r.Obj(), "task_id")
	h.Service.Tick(ctx) // before the deadline: nothing happens
	if got, _ := h.Service.HEM().Get(ctx, atptest.Project, taskID); got.Status != hem.StatusPending {
		t.Fatalf("before the deadline: %s", got.Status)
	}
	h.Stop()

	h2 := atptest.StartIn(t, dir, atptest.Options{Clock: clock})
	sub := wakeups(t, h2, "guest-agent")
	clock.Add(4*time.Hour + time.Second) // HEM-MANDATE-01's protocol_deadline is PT4H
	h2.Service.Tick(ctx)
	woke := resolution(t, h2, sub, r.Turn, r.ToolCallID)
	if woke["status"] != "DECLINED" || woke["declined_by"] != "protocol_deadline" || woke["secondary_path_taken"] != true ||
		!strings.Contains(atptest.Str(woke, "reason"), "PT4H") {
		t.Fatalf("secondary path = %v", woke)
	}
	nb, err := h2.Service.Store().Get(ctx, atptest.Project, b.ID)
	if err != nil || len(nb.ActiveHEM) != 0 {
		t.Fatalf("booking still held: %+v, %v", nb, err)
	}
}

func TestHEMCatalogueData(t *testing.T) {
	c := hem.Default()
	e, ok := c.Get(hem.MandateGapID)
	if !ok || e.ProtocolDeadline != 4*time.Hour || !e.TokenRequired || e.Secondary.Status != hem.StatusDeclined {
		t.Fatalf("HEM-MANDATE-01 = %+v", e)
	}
	for _, tc := range []struct {
		e    hem.Entry
		want string
	}{
		{hem.Entry{HEMID: "X-1", Priority: "P1", Deadline: "PT1H", Outcome: "o", Secondary: hem.Secondary{Status: "DECLINED"}}, "must start with HEM-"},
		{hem.Entry{HEMID: "HEM-07", Priority: "P9", Deadline: "PT1H", Outcome: "o", Secondary: hem.Secondary{Status: "DECLINED"}}, "priority"},
		{hem.Entry{HEMID: "HEM-07", Priority: "P1", Deadline: "1h", Outcome: "o", Secondary: hem.Secondary{Status: "DECLINED"}}, "ISO 8601"},
		{hem.Entry{HEMID: "HEM-07", Priority: "P1", Deadline: "PT15M", Outcome: "o", Secondary: hem.Secondary{Status: "MAYBE"}}, "secondary_path.status"},
	} {
		if err := c.Add(tc.e); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.e, err, tc.want)
		}
	}
	for s, d := range map[string]time.Duration{"PT15M": 15 * time.Minute, "P1DT2H": 26 * time.Hour, "PT30S": 30 * time.Second} {
		if got, err := hem.ParseDuration(s); err != nil || got != d {
			t.Errorf("%s = %v, %v", s, got, err)
		}
	}
}

// TestWildcardHEMMandateRefusedAtUse: a mandate signed by the project's
// key whose policy permits invoke_hem for any hem_id (one mandate.Issue
// would refuse, so it is signed by hand here) is refused when used.
func TestWildcardHEMMandateRefusedAtUse(t *testing.T) {
	h := atptest.Start(t, atptest.Options{})
	ctx := context.Background()
	b, err := h.Service.LoadFixture(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := h.Mesh.Auth().Keys.Ensure(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claims := mandate.Claims{JTI: "wild-1", Issuer: key.Issuer, Subject: "wild", IssuedAt: now.Unix(), ExpiresAt: now.Add(time.Hour).Unix(),
		ATPVersion: mandate.ATPVersion, ParentChain: []string{},
		Mandate: mandate.Grant{RARFormat: mandate.RARFormat, PolicySet: `permit(principal, action == ATPAction::"invoke_hem", resource);`}}
	hb, _ := json.Marshal(mandate.Header{Alg: mandate.Algorithm, Typ: mandate.TokenType, Kid: key.KID})
	cb, _ := json.Marshal(claims)
	b64 := base64.RawURLEncoding
	input := b64.EncodeToString(hb) + "." + b64.EncodeToString(cb)
	tok := input + "." + b64.EncodeToString(ed25519.Sign(key.Private, []byte(input)))

	e := h.Agent("wild", tok).Fail(tools.ToolInvokeHEM, invokeArgs(b.ID, hem.MandateGapID, hem.TriggerMandateGap), card.CodeAuthFailed)
	if !strings.Contains(e.Message, "hem_id") {
		t.Fatalf("refusal = %+v", e)
	}
	if tasks, _ := h.Service.HEM().List(ctx, atptest.Project, ""); len(tasks) != 0 {
		t.Fatalf("a task was created: %+v", tasks)
	}
	// Refused at use with the ATP denial body: by the gate, which re-checks
	// the enumeration when it verifies the mandate (mandate_invalid), or by
	// the tool's own check (mandate_scope_violation).
	var d tools.ScopeDenial
	if err := json.Unmarshal(e.Detail, &d); err != nil || d.ATPErrorCode != "MCP-403-SCOPE" || d.RequiredScope != "HEM_INVOKE" ||
		(d.Error != "mandate_scope_violation" && d.Error != "mandate_invalid") {
		t.Fatalf("detail = %s (%v): the wildcard must be refused at use, not only by mandate.Issue, with the MCP-403-SCOPE body", e.Detail, err)
	}
}

// TestHEMSubAgentMandateLifetime: a mandate narrowed for a HEM sub-agent
// may live the HEM's protocol_deadline + 5 minutes (MCP-D3), no longer.
func TestHEMSubAgentMandateLifetime(t *testing.T) {
	h := atptest.Start(t, atptest.Options{})
	ctx := context.Background()
	b, err := h.Service.LoadFixture(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := h.Mesh.Auth().Keys.Ensure(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, tc := range []struct {
		name   string
		ttl    time.Duration
		parent []string
		ok     bool
	}{
		{"sub-agent within PT4H + 5 min", 4*time.Hour + 5*time.Minute, []string{"root-jti"}, true},
		{"sub-agent too long", 5 * time.Hour, []string{"root-jti"}, false},
		{"root mandate is not a HEM sub-agent", 24 * time.Hour, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agentID := fmt.Sprintf("sub-agent-%d", i)
			tok, err := mandate.Issue(key, mandate.Claims{Subject: agentID, IssuedAt: now.Unix(), ExpiresAt: now.Add(tc.ttl).Unix(), ParentChain: tc.parent,
				Mandate: mandate.Grant{PolicySet: atptest.AllTools(hem.MandateGapID)}}, now)
			if err != nil {
				t.Fatal(err)
			}
			r := h.Agent(agentID, tok).Call(tools.ToolInvokeHEM, map[string]any{"hem_id": hem.MandateGapID, "booking_object_id": b.ID,
				"context": map[string]any{"trigger_reason": hem.TriggerMandateGap, "agent_assessment": "gap"}})
			if tc.ok != (r.Status == card.StatusSuccess) {
				t.Fatalf("status %s, error %+v", r.Status, r.Error)
			}
			if !tc.ok && (r.Error.Code != card.CodeAuthFailed || !strings.Contains(r.Error.Message, "MCP-D3")) {
				t.Fatalf("error %+v", r.Error)
			}
		})
	}
	if tasks, _ := h.Service.HEM().List(ctx, atptest.Project, ""); len(tasks) != 2 || b.ID == "" {
		t.Fatalf("tasks = %d, want 2 (the refused call made none)", len(tasks))
	}
}
