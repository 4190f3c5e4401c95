package utp

import (
	"strconv"

	"github.com/nats-io/nats.go"
)

// CallHeaders are the CG-* identity headers of one call, which every
// message about the call carries beside its body (docs/protocol.md §8.1):
// the command an agent publishes, the report a tool service sends and the
// wakeup the inbox rings.
type CallHeaders struct {
	ProjectID   string
	ChannelID   string
	AgentID     string
	AgentTurnID string
	TurnEpoch   int64
	ToolCallID  string
	// StepID is set only when not empty.
	StepID string
}

// Set writes the headers into h, replacing what h held under their names.
func (c CallHeaders) Set(h nats.Header) {
	h.Set(HeaderProjectID, c.ProjectID)
	h.Set(HeaderChannelID, c.ChannelID)
	h.Set(HeaderAgentID, c.AgentID)
	h.Set(HeaderAgentTurnID, c.AgentTurnID)
	h.Set(HeaderTurnEpoch, strconv.FormatInt(c.TurnEpoch, 10))
	h.Set(HeaderToolCallID, c.ToolCallID)
	if c.StepID != "" {
		h.Set(HeaderStepID, c.StepID)
	}
}
