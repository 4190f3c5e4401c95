package windley_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh/gatetest"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atp/atpauthz"
	"github.com/utpmesh/utpmesh/services/atp/windley"
	"github.com/utpmesh/utpmesh/services/echo"
)

// TestLoop: the loop queries before planning, re-queries on a state
// transition and a new mandate only, and turns a missing action into the
// atp_invoke_hem arguments of a mandate-gap escalation.
func TestLoop(t *testing.T) {
	g := gatetest.Start(t, gatetest.Options{Catalogues: []authz.Catalogue{atpauthz.New(nil)}, Tools: []worker.Tool{echo.Tool()}})
	m, demo := g.Mesh, g.Demo
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := g.Agent(t, authz.DemoAgent, demo)
	w := windley.NewLoop(c, "turn-w", "")
	state := "PRE_JOURNEY"
	r, err := w.Start(ctx, &state)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Permits("echo", "") || r.TemplateVersion != atpauthz.WindleyTemplateVersion || !strings.Contains(r.ContextBlock, "- echo (Action::\"echo\")") {
		t.Fatalf("residual = %+v", r)
	}
	// The same state does not re-query; a transition does.
	if _, again, err := w.BookingState(ctx, "PRE_JOURNEY"); err != nil || again {
		t.Fatalf("same state: requeried=%v err=%v", again, err)
	}
	if _, again, err := w.HEMCompleted(ctx, "JOURNEY"); err != nil || !again {
		t.Fatalf("transition: requeried=%v err=%v", again, err)
	}
	// A narrower mandate: echo disappears from the permitted set.
	key, _ := m.Auth().Keys.Load(ctx, "demo")
	v := &mandate.Verifier{Keys: m.Auth().Keys}
	parent, err := v.Verify(ctx, demo, mandate.IssuerName("demo"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mandate.Narrow(key, parent, mandate.Claims{Subject: authz.DemoAgent,
		Mandate: mandate.Grant{PolicySet: `permit(principal, action == ATPAction::"notify_traveller", resource);`}}, time.Now()); !errors.Is(err, mandate.ErrTooWide) {
		t.Fatalf("widening narrow = %v", err)
	}
	narrow, err := mandate.Narrow(key, parent, mandate.Claims{Subject: authz.DemoAgent,
		Mandate: mandate.Grant{PolicySet: `permit(principal == Agent::"demo-agent", action in [Action::"echo"], resource in Project::"demo") when { context.booking_state == "NEVER" };`}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r, err = w.NewMandate(ctx, narrow)
	if err != nil {
		t.Fatal(err)
	}
	if w.Permits("echo", "") || w.Queries() != 3 {
		t.Fatalf("after the new mandate: %+v, %d queries", r.Permitted, w.Queries())
	}
	gap, err := windley.NewMandateGap(r, "echo", `Action::"echo"`, "", "the plan needs to echo the itinerary")
	if err != nil {
		t.Fatal(err)
	}
	args, err := gap.InvokeHEMArguments()
	if err != nil {
		t.Fatal(err)
	}
	var a struct {
		HEMID   string `json:"hem_id"`
		Context struct {
			TriggerReason   string `json:"trigger_reason"`
			AgentAssessment string `json:"agent_assessment"`
		} `json:"context"`
	}
	if err := json.Unmarshal(args, &a); err != nil || a.HEMID != windley.HEMMandateGap || a.Context.TriggerReason != windley.TriggerMandateGap ||
		!strings.Contains(a.Context.AgentAssessment, `"missing_action":"Action::\"echo\""`) {
		t.Fatalf("invoke_hem arguments = %s (%v)", args, err)
	}
}
