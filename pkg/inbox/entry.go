package inbox

import (
	"context"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// State is the life-cycle state of an entry.
type State string

// The entry states. pending → acked (the agent consumed it) and pending →
// stale (a newer epoch of the turn was declared) are the only transitions;
// acked and stale are final.
const (
	// StatePending: delivered (or being delivered) to the agent, not yet
	// acknowledged.
	StatePending State = "pending"
	// StateAcked: the agent acknowledged the entry.
	StateAcked State = "acked"
	// StateStale: the report belongs to an older epoch of its turn than the
	// highest one seen; it wakes no one and is kept for audit.
	StateStale State = "stale"
	// StateAll selects every state in a ListQuery; no entry has it.
	StateAll State = "all"
)

// Valid reports whether s is pending, acked or stale.
func (s State) Valid() bool { return s == StatePending || s == StateAcked || s == StateStale }

// Entry is one accepted report, as the inbox keeps it and the svc operations
// return it. Times are UTC.
type Entry struct {
	// InboxID is the entry's id, a UUIDv7 (card.NewID).
	InboxID string `json:"inbox_id"`
	// ProjectID and ChannelID come from the report's subject.
	ProjectID string `json:"project_id"`
	ChannelID string `json:"channel_id"`
	// The report's routing and pointer fields.
	AgentID          string              `json:"agent_id"`
	AgentTurnID      string              `json:"agent_turn_id"`
	TurnEpoch        int64               `json:"turn_epoch"`
	ToolCallID       string              `json:"tool_call_id"`
	ToolResultCardID string              `json:"tool_result_card_id"`
	Status           card.Status         `json:"status"`
	AfterExecution   card.AfterExecution `json:"after_execution"`
	StepID           string              `json:"step_id,omitempty"`
	ToolName         string              `json:"tool_name,omitempty"`
	// State is pending, acked or stale.
	State State `json:"state"`
	// CreatedAt is when the inbox stored the entry.
	CreatedAt time.Time `json:"created_at"`
	// AckedAt is when the agent acknowledged it.
	AckedAt *time.Time `json:"acked_at,omitempty"`
	// WakeupSentAt is when JetStream confirmed the wakeup. Nil on a pending
	// entry means the wakeup is not known to be published yet (a redelivered
	// report publishes it).
	WakeupSentAt *time.Time `json:"wakeup_sent_at,omitempty"`
	// Traceparent is the W3C trace context of the report (or the one the
	// inbox made when the report had none); the wakeup carries it.
	Traceparent string `json:"traceparent,omitempty"`
}

// ListQuery selects entries of one agent.
type ListQuery struct {
	// AgentID is the agent. Required.
	AgentID string `json:"agent_id"`
	// AgentTurnID, when set, keeps the entries of this turn only.
	AgentTurnID string `json:"agent_turn_id,omitempty"`
	// ToolCallID, when set (with AgentTurnID), keeps the entry of this call
	// only: a lookup of the call, not a read of the whole turn.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// State is pending (when empty), acked, stale or all.
	State State `json:"state,omitempty"`
	// Limit caps the number of entries; 0 or more than MaxList means MaxList.
	Limit int `json:"limit,omitempty"`
	// After is a cursor: return entries created after the entry with this
	// inbox_id (which must be one of the agent's). Pass the last entry of
	// the previous page to read the next.
	After string `json:"after,omitempty"`
}

// API is what the inbox offers an agent: inboxsvc.Service in process and
// natsinbox.Client over NATS both implement it. project scopes every call.
type API interface {
	// List returns the agent's entries matching q, in creation order.
	List(ctx context.Context, project string, q ListQuery) ([]Entry, error)
	// Get returns one entry, or ErrNotFound.
	Get(ctx context.Context, project, inboxID string) (*Entry, error)
	// Ack marks pending entries acked and returns how many changed. Unknown
	// ids fail the whole call with ErrNotFound; re-acking is a no-op.
	Ack(ctx context.Context, project string, inboxIDs ...string) (int, error)
	// AckLazy is Ack without waiting for the disk: the ids are checked and
	// the pending ones counted at once, and the ack is written with the
	// inbox's next transaction. A crash before that leaves the entries
	// pending, so a runtime that resumes sees those results again (which
	// it must handle idempotently anyway: delivery is at least once).
	AckLazy(ctx context.Context, project string, inboxIDs ...string) (int, error)
	// SetEpoch raises the turn's highest epoch to epoch (never lowers it)
	// and returns the highest epoch now.
	SetEpoch(ctx context.Context, project, agentTurnID string, epoch int64) (int64, error)
}
