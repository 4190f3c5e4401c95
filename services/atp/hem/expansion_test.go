package hem

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseExpansion(t *testing.T) {
	gap := `{"missing_action":"ATPAction::\"record_safety_check\"","tool_name":"atp_record_safety_check","resource_condition":"resource == Booking::\"b1\"","agent_assessment":"needed"}`
	for _, tc := range []struct {
		name, context string
		action, cond  string // "" action: nil
		valid         bool
	}{
		{"windley gap JSON", `{"trigger_reason":"MANDATE_GAP_DETECTED","agent_assessment":` + strconvQuote(gap) + `}`, `ATPAction::"record_safety_check"`, `resource == Booking::"b1"`, true},
		{"requested_action", `{"agent_assessment":"boots","requested_action":"ATPAction::\"update_pre_arrangement\"","resource_condition":"resource == Booking::\"b2\""}`, `ATPAction::"update_pre_arrangement"`, `resource == Booking::"b2"`, true},
		{"free text", `{"agent_assessment":"need notify_traveller"}`, "", "", false},
		{"not an action", `{"agent_assessment":"x","requested_action":"notify_traveller"}`, "notify_traveller", "", false},
		{"not JSON", `[1]`, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := ParseExpansion(json.RawMessage(tc.context))
			if tc.action == "" {
				if x != nil {
					t.Fatalf("ParseExpansion = %+v, want nil", x)
				}
				return
			}
			if x == nil || x.Action != tc.action || x.ResourceCondition != tc.cond || x.Valid() != tc.valid {
				t.Fatalf("ParseExpansion = %+v (valid %v)", x, x != nil && x.Valid())
			}
		})
	}
}

func TestPromptOfAGap(t *testing.T) {
	tk := &Task{HEMID: MandateGapID, AgentID: "guest", Requester: &Requester{JTI: "j1"},
		Expansion: &Expansion{Action: `ATPAction::"notify_traveller"`, ResourceCondition: `resource == Booking::"b1"`, Assessment: "tell them"}}
	p := tk.Prompt()
	for _, want := range []string{`agent guest asks for ATPAction::"notify_traveller" on resource == Booking::"b1"`, "its mandate j1", "Why: tell them", "never wider"} {
		if !strings.Contains(p, want) {
			t.Errorf("prompt %q lacks %q", p, want)
		}
	}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }
