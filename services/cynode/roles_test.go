package cynode_test

import (
	"testing"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/utp"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
)

// TestAdmittedCalls: the gateway identifies a call the mesh admitted from
// its verified principal (the card carries no mandate then), and refuses
// a principal the admission does not vouch for.
func TestAdmittedCalls(t *testing.T) {
	h := ct.Start(t, nil)
	seed(t, h)
	get := map[string]any{"task_id": "t1"}
	for _, tc := range []struct {
		name, agent, principal string
		adm                    *utp.Admission
		typ                    string // "" success
	}{
		{"agent with a verified mandate", ct.PMAgent, "agent:" + ct.PMAgent, &utp.Admission{Principal: "agent:" + ct.PMAgent, MandateJTI: "m1"}, ""},
		{"agent admitted without a mandate", ct.PMAgent, "agent:" + ct.PMAgent, &utp.Admission{Principal: "agent:" + ct.PMAgent}, "unauthenticated"},
		{"principal not the admission's", ct.PMAgent, "operator:mallory", &utp.Admission{Principal: "agent:" + ct.PMAgent, MandateJTI: "m1"}, "unauthenticated"},
		{"principal of another agent", ct.PMAgent, "agent:" + ct.PAAgent, &utp.Admission{Principal: "agent:" + ct.PAAgent, MandateJTI: "m1"}, "unauthenticated"},
		{"unregistered agent", ct.Unregistered, "agent:" + ct.Unregistered, &utp.Admission{Principal: "agent:" + ct.Unregistered, MandateJTI: "m1"}, "unauthenticated"},
		{"operator principal without an admission", ct.PMAgent, "operator:mallory", nil, "unauthenticated"},
		{"sandbox agent still bound by its allowlist", ct.SandboxAgent, "agent:" + ct.SandboxAgent, &utp.Admission{Principal: "agent:" + ct.SandboxAgent, MandateJTI: "m1"}, "not_allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.Admitted(tc.agent, tc.adm, tc.principal, "db.task.get", get)
			if tc.typ == "" {
				if r.Status != card.StatusSuccess || ct.Str(r.Value(), "project_id") != ct.Project {
					t.Fatalf("status %s, error %+v, value %v", r.Status, r.Error, r.Value())
				}
				return
			}
			if r.Status != card.StatusFailed || r.ErrorType() != tc.typ || r.Error.Code != card.CodeAuthFailed {
				t.Fatalf("status %s, error %+v; want %s (auth_failed)", r.Status, r.Error, tc.typ)
			}
		})
	}
	// An operator's forged setting write without the admission is refused.
	r := h.Admitted(ct.PMAgent, nil, "operator:mallory", "db.system_setting.create", map[string]any{"key": "agents.x", "value": true, "value_type": "boolean"})
	if r.Status != card.StatusFailed || r.Error.Code != card.CodeAuthFailed {
		t.Fatalf("forged operator write: %s %+v", r.Status, r.Error)
	}
}

// TestOperatorOnlyTools: exactly the tools that write system settings
// are registered operator-only.
func TestOperatorOnlyTools(t *testing.T) {
	h := ct.Start(t, nil)
	want := map[string]bool{"db.system_setting.create": true, "db.system_setting.update": true, "db.system_setting.delete": true}
	for _, tl := range h.Service.Tools() {
		if got := tl.Options.Principal == registry.PrincipalOperator; got != want[tl.Name] {
			t.Errorf("%s: operator-only %v, want %v", tl.Name, got, want[tl.Name])
		}
	}
}
