package utp_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// TestDispatchRequestCheck: each broken rule is refused naming the field;
// absent arguments are {}.
func TestDispatchRequestCheck(t *testing.T) {
	ok := func() utp.DispatchRequest {
		return utp.DispatchRequest{AgentID: "a", AgentTurnID: "t", ToolCallID: "c", StepID: "s", ToolName: "echo",
			Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	}
	r := ok()
	args, err := r.Check()
	if err != nil || string(args) != "{}" {
		t.Fatalf("valid request: %s, %v", args, err)
	}
	for _, tc := range []struct {
		name, field string
		change      func(r *utp.DispatchRequest)
	}{
		{"no agent", "agent_id is required", func(r *utp.DispatchRequest) { r.AgentID = "" }},
		{"no turn", "agent_turn_id is required", func(r *utp.DispatchRequest) { r.AgentTurnID = "" }},
		{"control char", "tool_call_id", func(r *utp.DispatchRequest) { r.ToolCallID = "a\x01" }},
		{"negative epoch", "turn_epoch", func(r *utp.DispatchRequest) { r.TurnEpoch = -1 }},
		{"bad after_execution", "after_execution", func(r *utp.DispatchRequest) { r.AfterExecution = "later" }},
		{"bad traceparent", "traceparent", func(r *utp.DispatchRequest) { r.Traceparent = "x" }},
		{"array arguments", "must be a JSON object", func(r *utp.DispatchRequest) { r.Arguments = json.RawMessage(`[1]`) }},
		{"typed metadata", `metadata key "mandate"`, func(r *utp.DispatchRequest) { r.Metadata = map[string]json.RawMessage{"mandate": []byte(`"x"`)} }},
		{"bad metadata", "not valid JSON", func(r *utp.DispatchRequest) { r.Metadata = map[string]json.RawMessage{"mcp": []byte(`{`)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok()
			tc.change(&r)
			if _, err := r.Check(); !errors.Is(err, utp.ErrDispatch) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Check = %v, want ErrDispatch naming %q", err, tc.field)
			}
		})
	}
}

// TestCheckOwnAdmission: a header the process signed itself is checked
// field by field without its signature; a changed field is refused.
func TestCheckOwnAdmission(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	cmd := &utp.Command{AgentID: "a", AgentTurnID: "t", ToolCallID: "c", ToolCallCardID: "id", AfterExecution: card.Suspend}
	hdr, err := utp.SignAdmission(priv, utp.Admission{Subject: "s", AgentID: "a", AgentTurnID: "t", ToolCallID: "c", ToolCallCardID: "id", AfterExecution: card.Suspend})
	if err != nil {
		t.Fatal(err)
	}
	if a, err := utp.CheckOwnAdmission(hdr, "s", cmd); err != nil || a.ToolCallID != "c" {
		t.Fatalf("own header: %v", err)
	}
	other := *cmd
	other.ToolCallID = "d"
	if _, err := utp.CheckOwnAdmission(hdr, "s", &other); !errors.Is(err, utp.ErrAdmission) {
		t.Fatalf("changed tool_call_id: %v", err)
	}
	if _, err := utp.CheckOwnAdmission(hdr, "elsewhere", cmd); !errors.Is(err, utp.ErrAdmission) {
		t.Fatalf("changed subject: %v", err)
	}
}
