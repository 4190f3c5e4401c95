package inbox

import (
	"fmt"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// CheckProject reports, as ErrInvalid, a project id that is not a valid
// name (a subject token).
func CheckProject(project string) error {
	if err := card.ValidateName("project_id", project); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// CheckInboxID reports, as ErrInvalid naming field, an id that is not an
// inbox_id (a canonical lower-case UUID).
func CheckInboxID(field, id string) error {
	if !card.ValidID(id) {
		return fmt.Errorf("%w: %s %q is not an inbox_id (a canonical lower-case UUID)", ErrInvalid, field, id)
	}
	return nil
}

// CheckTurn reports, as ErrInvalid, a missing or too long agent_turn_id
// and a negative epoch.
func CheckTurn(agentTurnID string, epoch int64) error {
	if agentTurnID == "" {
		return fmt.Errorf("%w: agent_turn_id is required", ErrInvalid)
	}
	if len(agentTurnID) > card.MaxIDLen {
		return fmt.Errorf("%w: agent_turn_id is longer than %d bytes", ErrInvalid, card.MaxIDLen)
	}
	if epoch < 0 {
		return fmt.Errorf("%w: turn_epoch %d is negative", ErrInvalid, epoch)
	}
	return nil
}

// Normalize validates q and fills its defaults: State pending when empty,
// Limit MaxList when 0 or above it. Its errors match ErrInvalid.
func (q ListQuery) Normalize() (ListQuery, error) {
	if q.AgentID == "" {
		return q, fmt.Errorf("%w: agent_id is required", ErrInvalid)
	}
	if err := card.ValidateName("agent_id", q.AgentID); err != nil {
		return q, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if q.State == "" {
		q.State = StatePending
	}
	if !q.State.Valid() && q.State != StateAll {
		return q, fmt.Errorf("%w: state %q is not pending, acked, stale or all", ErrInvalid, q.State)
	}
	if q.Limit < 0 {
		return q, fmt.Errorf("%w: limit %d is negative", ErrInvalid, q.Limit)
	}
	if q.Limit == 0 || q.Limit > MaxList {
		q.Limit = MaxList
	}
	if q.ToolCallID != "" && q.AgentTurnID == "" {
		return q, fmt.Errorf("%w: tool_call_id needs agent_turn_id (a call is found within its turn)", ErrInvalid)
	}
	if len(q.ToolCallID) > card.MaxIDLen {
		return q, fmt.Errorf("%w: tool_call_id is longer than %d bytes", ErrInvalid, card.MaxIDLen)
	}
	if q.After != "" && !card.ValidID(q.After) {
		return q, fmt.Errorf("%w: after %q is not an inbox_id (a canonical lower-case UUID)", ErrInvalid, q.After)
	}
	return q, nil
}
