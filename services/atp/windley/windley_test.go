package windley_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cedar-policy/cedar-go/types"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atp/atpauthz"
	"github.com/utpmesh/utpmesh/services/atp/windley"
	"github.com/utpmesh/utpmesh/services/echo"
)

// authMesh starts a mesh with the gate on and the ATP catalogue's
// authorization registered, echo served, and the demo setup of `utpmesh
// up`; it returns the demo mandate.
func authMesh(t *testing.T) (*mesh.Mesh, string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Tools: []worker.Tool{echo.Tool()},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Auth: &mesh.AuthConfig{Catalogues: []authz.Catalogue{atpauthz.New(nil)}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	act, _ := authz.ActionOf((&worker.Tool{Name: echo.Name}).Entry("demo"))
	res, err := authz.SetupDemo(ctx, m.Auth().Store, m.Auth().Keys, []string{"demo"}, []types.EntityUID{act}, dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(dir, authz.DemoMandateFile))
	if err != nil || res.MandatePath == "" || !res.PolicyInstalled {
		t.Fatalf("demo setup: %+v, %v", res, err)
	}
	return m, strings.TrimSpace(string(tok))
}

func newAgent(t *testing.T, m *mesh.Mesh, id, mand string) *agent.Client {
	t.Helper()
	c, err := agent.New(m.Conn(), agent.Config{Project: "demo", AgentID: id, Mandate: mand})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestLoop: the loop queries before planning, re-queries on a state
// transition and a new mandate only, and turns a missing action into the
// atp_invoke_hem arguments of a mandate-gap escalation.
func TestLoop(t *testing.T) {
	m, demo := authMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newAgent(t, m, authz.DemoAgent, demo)
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
