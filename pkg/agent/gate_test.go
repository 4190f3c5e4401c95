package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh/gatetest"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

func TestGateOnTheMesh(t *testing.T) {
	g := gatetest.Start(t, gatetest.Options{Tools: []worker.Tool{echo.Tool()}})
	m, demo := g.Mesh, g.Demo
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	audits, err := m.Conn().SubscribeSync("cg.v1r3.demo.*.evt.sys.authz.decision")
	if err != nil {
		t.Fatal(err)
	}
	key, err := m.Auth().Keys.Load(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	other, err := mandate.Issue(key, mandate.Claims{Subject: authz.DemoAgent, ExpiresAt: time.Now().Add(time.Hour).Unix(),
		Mandate: mandate.Grant{PolicySet: `permit(principal, action == ATPAction::"get_booking_status", resource);`}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		agentID string
		mandate string
		reason  string // "" = success
	}{
		{"demo mandate", authz.DemoAgent, demo, ""},
		{"no mandate", authz.DemoAgent, "", authz.ReasonMandateMissing},
		{"someone else's mandate", "intruder", demo, authz.ReasonSubjectMismatch},
		{"mandate without echo", authz.DemoAgent, other, authz.ReasonScopeViolation},
		{"garbage token", authz.DemoAgent, "not.a.token", authz.ReasonMandateInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := g.Agent(t, tc.agentID, tc.mandate)
			out, err := c.Call(ctx, agent.CallRequest{ToolName: "echo", Arguments: json.RawMessage(`{"x":1}`), AgentTurnID: "turn-" + strings.ReplaceAll(tc.name, " ", "-")})
			if err != nil {
				t.Fatal(err)
			}
			if tc.reason == "" {
				if out.Result.Status != card.StatusSuccess {
					t.Fatalf("result = %+v", out.Result)
				}
			} else {
				if out.Result.Status != card.StatusFailed || out.Result.Error == nil || out.Result.Error.Code != card.CodeAuthFailed {
					t.Fatalf("result = %+v, want failed auth_failed", out.Result)
				}
				var d authz.AuthFailedDetail
				if err := json.Unmarshal(out.Result.Error.Detail, &d); err != nil || d.Reason != tc.reason || d.Tool != "echo" || d.RequiredAction != `Action::"echo"` {
					t.Fatalf("detail = %s (%v), want reason %s", out.Result.Error.Detail, err, tc.reason)
				}
				if tc.reason == authz.ReasonScopeViolation && (len(d.Granted) == 0 || !strings.Contains(d.Granted[0], "get_booking_status")) {
					t.Fatalf("granted = %v", d.Granted)
				}
			}
			msg, err := audits.NextMsg(10 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			// One call at a time: its decision is the message's only record.
			recs, err := authz.ParseAuditRecords(msg.Data)
			if err != nil || len(recs) != 1 || recs[0].ToolName != "echo" || recs[0].AgentID != tc.agentID {
				t.Fatalf("audit = %s (%v)", msg.Data, err)
			}
			rec := recs[0]
			if want := tc.reason == ""; (rec.Decision == authz.DecisionAllow) != want || strings.Contains(string(msg.Data), `"x":1`) {
				t.Fatalf("audit = %s", msg.Data)
			}
		})
	}
}
