package utp_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/utp"
)

func TestCallHeaders(t *testing.T) {
	tests := []struct {
		name string
		in   utp.CallHeaders
		want map[string]string // header → value; "" means absent
	}{
		{"every header", utp.CallHeaders{ProjectID: "p", ChannelID: "c", AgentID: "a", AgentTurnID: "t", TurnEpoch: 3, ToolCallID: "k", StepID: "s"},
			map[string]string{utp.HeaderProjectID: "p", utp.HeaderChannelID: "c", utp.HeaderAgentID: "a", utp.HeaderAgentTurnID: "t",
				utp.HeaderTurnEpoch: "3", utp.HeaderToolCallID: "k", utp.HeaderStepID: "s"}},
		{"no step id", utp.CallHeaders{ProjectID: "p", ChannelID: "c", AgentID: "a", AgentTurnID: "t", ToolCallID: "k"},
			map[string]string{utp.HeaderTurnEpoch: "0", utp.HeaderStepID: ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := nats.Header{}
			h.Set(utp.HeaderProjectID, "old") // replaced, not added to
			tc.in.Set(h)
			for k, want := range tc.want {
				if got := h.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			if n := len(h.Values(utp.HeaderProjectID)); n != 1 {
				t.Errorf("%s has %d values, want 1", utp.HeaderProjectID, n)
			}
		})
	}
}
