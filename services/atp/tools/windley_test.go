package tools_test

import (
	"context"
	"testing"

	"github.com/utpmesh/utpmesh/services/atp/internal/atptest"
	"github.com/utpmesh/utpmesh/services/atp/tools"
	"github.com/utpmesh/utpmesh/services/atp/windley"
)

// TestWindleyRequeryOnTransition: the agent's Windley loop, fed the state
// atp_get_booking_status reports, re-queries when the booking moves and
// loses atp_update_pre_arrangement (permitted in PRE_JOURNEY only), as the
// addendum's MCP-D14 example says.
func TestWindleyRequeryOnTransition(t *testing.T) {
	h := atptest.Start(t, atptest.Options{})
	ctx := context.Background()
	b, err := h.Service.LoadFixture(ctx, atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	tok := h.Mandate("guest-agent", `permit(principal, action in [ATPAction::"get_booking_status", ATPAdminAction::"booking_transition"], resource);
permit(principal, action == ATPAction::"update_pre_arrangement", resource) when { context.booking_state == "PRE_JOURNEY" };`)
	ag := h.Agent("guest-agent", tok)
	status := func() string {
		return atptest.Str(ag.OK(tools.ToolGetBookingStatus, map[string]any{"booking_object_id": b.ID}).Obj(), "state")
	}
	w := windley.NewLoop(ag.Client(), "turn-windley", "")
	st := status()
	if _, err := w.Start(ctx, &st); err != nil {
		t.Fatal(err)
	}
	if !w.Permits(tools.ToolUpdatePreArr, "") {
		t.Fatalf("in %s the loop does not permit %s", st, tools.ToolUpdatePreArr)
	}
	if _, again, err := w.BookingState(ctx, status()); err != nil || again {
		t.Fatalf("same state re-queried: %v %v", again, err)
	}
	ag.OK(tools.ToolBookingTransition, map[string]any{"booking_object_id": b.ID, "to": "JOURNEY"})
	if _, again, err := w.BookingState(ctx, status()); err != nil || !again {
		t.Fatalf("no re-query after the transition: %v %v", again, err)
	}
	if w.Permits(tools.ToolUpdatePreArr, "") {
		t.Fatal("after PRE_JOURNEY -> JOURNEY the loop still permits atp_update_pre_arrangement")
	}
}
