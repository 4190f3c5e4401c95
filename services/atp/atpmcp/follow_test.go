package atpmcp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge/mcptest"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/services/atp/internal/atptest"
	"github.com/utpmesh/utpmesh/services/atp/tools"
)

// TestBridgeFollowsBookingState: an MCP host (the official Go SDK client)
// whose mandate is bound to a booking lists atp_update_pre_arrangement
// (permitted in PRE_JOURNEY); another actor moves the booking to JOURNEY;
// the bridge, told by the booking's state event, sends
// notifications/tools/list_changed, and the host's next tools/list —
// mandate_query re-run with the new state — no longer offers it.
func TestBridgeFollowsBookingState(t *testing.T) {
	f := startMesh(t)
	ctx := context.Background()
	key, _, err := f.m.Auth().Keys.Ensure(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	ops := f.h.Agent("ops", f.h.Mandate("ops", atptest.AllTools()))
	mcptest.Each(t, func(t *testing.T, tr mcptest.Transport, ver string) {
		// A booking of its own, in PRE_JOURNEY (CONFIRMED).
		id := atptest.Str(ops.OK(tools.ToolBookingCreate, map[string]any{"booking": tools.FixtureBooking(), "advance_to": "CONFIRMED"}).Obj(), "booking_object_id")
		tok, err := mandate.Issue(key, mandate.Claims{Subject: "guest-host", ExpiresAt: time.Now().Add(time.Hour).Unix(), Resource: &id,
			Mandate: mandate.Grant{PolicySet: `permit(principal, action == ATPAction::"get_booking_status", resource);
permit(principal, action == ATPAction::"update_pre_arrangement", resource) when { context.booking_state == "PRE_JOURNEY" };`}}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		changed := make(chan struct{}, 8)
		br := newBridge(t, f.m)
		cs := mcptest.Connect(t, br, tr, ver, tok, &sdk.ClientOptions{
			ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { changed <- struct{}{} }})
		before := mcptest.ToolNames(t, cs)
		if before[tools.ToolUpdatePreArr] == nil || before[tools.ToolGetBookingStatus] == nil {
			t.Fatalf("tools before the transition: %v", keys(before))
		}
		ops.OK(tools.ToolBookingTransition, map[string]any{"booking_object_id": id, "to": "JOURNEY", "reason": "guests arrived"})
		select {
		case <-changed:
		case <-time.After(time.Minute):
			t.Fatal("no notifications/tools/list_changed after the booking's transition")
		}
		if br.StateChanges() != 1 {
			t.Fatalf("the bridge announced %d state changes, want 1", br.StateChanges())
		}
		after := mcptest.ToolNames(t, cs)
		if after[tools.ToolUpdatePreArr] != nil || after[tools.ToolGetBookingStatus] == nil {
			t.Fatalf("tools after PRE_JOURNEY -> JOURNEY: %v; want atp_update_pre_arrangement gone", keys(after))
		}
	})
}

func keys(m map[string]*sdk.Tool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestHEMPromptNamesTheGap: the elicitation an MCP host's operator is
// asked for a structured mandate-gap escalation names the exact Cedar
// action and resource condition requested (MCP-D15).
func TestHEMPromptNamesTheGap(t *testing.T) {
	f := startMesh(t)
	args := map[string]any{"booking_object_id": invokeHEM["booking_object_id"], "hem_id": "HEM-MANDATE-01",
		"context": map[string]any{"trigger_reason": "MANDATE_GAP_DETECTED", "agent_assessment": "boot sizes",
			"requested_action": `ATPAction::"update_pre_arrangement"`, "resource_condition": `resource == Booking::"b1"`}}
	var asked []string
	cs, _ := f.connect(t, mcptest.Stdio, "2025-11-25", f.issue(t, "gap-host", hemOperator), mcptest.Answer(mcptest.Confirm(false, "not now"), &asked))
	res := mcptest.CallTool(t, cs, "atp_invoke_hem", args)
	if s := mcptest.Structured(t, res); res.IsError || s["status"] != "DECLINED" || len(asked) != 1 ||
		!strings.Contains(asked[0], `a mandate expansion adding ATPAction::"update_pre_arrangement" on resource == Booking::"b1"`) {
		t.Fatalf("structured %v, asked %q", s, asked)
	}
	// Approving issues a sub-mandate narrowed from the agent's parent,
	// which the handoff does not hold: the host is told what to run.
	cs, _ = f.connect(t, mcptest.Stdio, "2025-11-25", f.issue(t, "gap-host-2", hemOperator), mcptest.Answer(mcptest.Confirm(true, ""), &asked))
	res = mcptest.CallTool(t, cs, "atp_invoke_hem", args)
	if !res.IsError || !strings.Contains(mcptest.Text(res), "--parent-mandate") {
		t.Fatalf("confirm of an expansion through the handoff: isError %v, %q", res.IsError, mcptest.Text(res))
	}
}
