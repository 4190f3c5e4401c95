package cardstore

import (
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// The rules of reading cards and listing turns, for every store: argument
// checks, page limits, the counting of a turn's summary, and the errors
// naming what is not found.

// CheckGet validates the arguments of Get.
func CheckGet(projectID, cardID string) error {
	if err := CheckProject(projectID); err != nil {
		return err
	}
	return CheckCardID("card_id", cardID)
}

// CheckTurn validates the project and agent_turn_id of a read of one
// turn (FindToolCall).
func CheckTurn(projectID, agentTurnID string) error {
	if err := CheckProject(projectID); err != nil {
		return err
	}
	return CheckKeyPart("agent_turn_id", agentTurnID)
}

// CardNotFound is the ErrNotFound error of a card the project does not
// have.
func CardNotFound(projectID, cardID string) error {
	return fmt.Errorf("%w: card %s in project %s", ErrNotFound, cardID, projectID)
}

// ResultNotFound is the ErrNotFound error of FindToolResult for a call
// without a result.
func ResultNotFound(projectID, agentTurnID, toolCallID string) error {
	return fmt.Errorf("%w: no tool.result for agent_turn_id %q, tool_call_id %q in project %s", ErrNotFound, agentTurnID, toolCallID, projectID)
}

// CallNotFound is the ErrNotFound error of FindToolCall for a call
// without a tool.call card.
func CallNotFound(projectID, agentTurnID, toolCallID string) error {
	return fmt.Errorf("%w: no tool.call card for agent_turn_id %q, tool_call_id %q in project %s", ErrNotFound, agentTurnID, toolCallID, projectID)
}

// PageLimit applies the Limit rule of ListTurn and ListTurns: 0 or more
// than MaxPage means MaxPage, negative is ErrInvalid.
func PageLimit(limit int) (int, error) {
	switch {
	case limit < 0:
		return 0, Invalid("limit %d is negative", limit)
	case limit == 0 || limit > MaxPage:
		return MaxPage, nil
	}
	return limit, nil
}

// CheckListTurn validates a ListTurnRequest and returns its page limit.
func CheckListTurn(req ListTurnRequest) (int, error) {
	if err := CheckTurn(req.ProjectID, req.AgentTurnID); err != nil {
		return 0, err
	}
	return PageLimit(req.Limit)
}

// CheckListTurns validates a ListTurnsRequest (an AgentID, when set, is
// a key part) and returns its page limit.
func CheckListTurns(req ListTurnsRequest) (int, error) {
	if err := CheckProject(req.ProjectID); err != nil {
		return 0, err
	}
	if req.AgentID != "" {
		if err := CheckKeyPart("agent_id", req.AgentID); err != nil {
			return 0, err
		}
	}
	return PageLimit(req.Limit)
}

// TurnSummary is what a store keeps of a turn for ListTurns, updated by
// Add in the write that stores each of the turn's cards.
type TurnSummary struct {
	AgentID     string    `json:"agent_id,omitempty"`
	FirstAt     time.Time `json:"first_at"`
	LastAt      time.Time `json:"last_at"`
	Cards       int       `json:"cards"`
	ToolCalls   int       `json:"tool_calls"`
	ToolResults int       `json:"tool_results"`
	Bytes       int64     `json:"bytes,omitempty"`
}

// Add counts one more card of the turn, of type typ, naming agentID (or
// ""), created at createdAt, size bytes in its canonical encoding. It reports whether the card set the turn's
// AgentID (the first card naming one), so that a store listing turns by
// agent adds the turn to the agent's list.
func (r *TurnSummary) Add(typ, agentID string, createdAt time.Time, size int) (agentSet bool) {
	if r.Cards == 0 {
		r.FirstAt = createdAt
	}
	r.Cards++
	r.Bytes += int64(size)
	r.LastAt = createdAt
	switch typ {
	case card.TypeToolCall:
		r.ToolCalls++
	case card.TypeToolResult:
		r.ToolResults++
	}
	if r.AgentID == "" && agentID != "" {
		r.AgentID = agentID
		return true
	}
	return false
}

// Info is the summary as ListTurns returns it for the turn turnID.
func (r *TurnSummary) Info(turnID string) TurnInfo {
	return TurnInfo{
		AgentTurnID: turnID, AgentID: r.AgentID, FirstAt: r.FirstAt, LastAt: r.LastAt,
		Cards: r.Cards, ToolCalls: r.ToolCalls, ToolResults: r.ToolResults, Bytes: r.Bytes,
	}
}
