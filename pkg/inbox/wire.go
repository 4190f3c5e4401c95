package inbox

import "github.com/utpmesh/utpmesh/pkg/svc"

// ServiceName is the service token of the inbox's svc subjects:
// cg.<ver>.<project>.<channel>.svc.inbox.<op>.
const ServiceName = "inbox"

// The svc operations, the last token of the subject.
const (
	OpList     = "list"
	OpGet      = "get"
	OpAck      = "ack"
	OpSetEpoch = "set_epoch"
	// OpReport is the operation through which a tool worker reports a
	// result and waits for the inbox's answer: the same report body and
	// headers as on cmd.sys.inbox.report, handled the same way, but
	// answered once the entry is on disk instead of being stored in the
	// command stream first (docs/protocol.md §8).
	OpReport = "report"
	// OpDeleteTurn removes a turn's entries for retention (Backend's
	// DeleteTurn). Only the mesh core and admins may use it: no role's
	// NATS permissions list it.
	OpDeleteTurn = "delete_turn"
)

// AgentOps are the operations an agent runtime may also send on its
// agent's own subject, cg.<ver>.<project>.<channel>.svc.inbox.<op>.<agent>
// (subjects.AgentService), the only inbox subjects a per-agent identity
// may publish: the service then serves that agent's entries and turns only
// (list: agent_id defaults to the agent, another is refused; get and ack:
// entries whose agent_id is the agent; set_epoch: a turn with no card or
// the agent's, cardstore.TurnAgent). Anything else is ErrForbidden (wire
// code forbidden), audited. Same bodies as the plain operations.
var AgentOps = []string{OpList, OpGet, OpAck, OpSetEpoch}

// Ops says which requests a client resends while unanswered (svc.Ops):
// the reads; set_epoch (it only raises the epoch, and a copy answers the
// same); ack (re-acking is a no-op; a copy answered first counts none of
// the entries the first copy acked, so its count is then a lower bound).
// Reports and deletes are sent once.
var Ops = svc.Ops{
	OpList: svc.Read, OpGet: svc.Read, OpSetEpoch: svc.Deduped, OpAck: svc.Deduped,
	OpReport: svc.Once, OpDeleteTurn: svc.Once,
}

// Wire codes of the inbox's own errors (the others are svc's common codes).
const (
	// CodeClosed is the wire code of ErrClosed.
	CodeClosed = "closed"
	// CodeRefused is the wire code of ErrRefused.
	CodeRefused = "refused"
	// CodePending is the wire code of ErrPending.
	CodePending = "pending"
)

// Codes maps the inbox's sentinel errors to svc wire codes and back.
var Codes = svc.Codes{
	{Err: ErrNotFound, Code: svc.CodeNotFound},
	{Err: ErrInvalid, Code: svc.CodeBadRequest},
	{Err: ErrClosed, Code: CodeClosed},
	{Err: ErrRefused, Code: CodeRefused},
	{Err: ErrPending, Code: CodePending},
	{Err: ErrForbidden, Code: svc.CodeForbidden},
}

// Request and reply bodies of the svc operations (docs/protocol.md §9.6, §11.5).
// The list request body is a ListQuery.
type (
	// ListReply is the reply of list.
	ListReply struct {
		Entries []Entry `json:"entries"`
	}
	// GetRequest is the request of get.
	GetRequest struct {
		InboxID string `json:"inbox_id"`
	}
	// GetReply is the reply of get.
	GetReply struct {
		Entry *Entry `json:"entry"`
	}
	// AckRequest is the request of ack.
	AckRequest struct {
		InboxIDs []string `json:"inbox_ids"`
		// Lazy: reply before the ack is on disk (see API.AckLazy).
		Lazy bool `json:"lazy,omitempty"`
	}
	// AckReply is the reply of ack: how many entries were pending.
	AckReply struct {
		Acked int `json:"acked"`
	}
	// SetEpochRequest is the request of set_epoch; TurnEpoch is required.
	SetEpochRequest struct {
		AgentTurnID string `json:"agent_turn_id"`
		TurnEpoch   *int64 `json:"turn_epoch"`
	}
	// SetEpochReply is the reply of set_epoch: the turn's highest epoch.
	SetEpochReply struct {
		TurnEpoch int64 `json:"turn_epoch"`
	}
	// DeleteTurnRequest is the request of delete_turn.
	DeleteTurnRequest struct {
		AgentTurnID string `json:"agent_turn_id"`
	}
	// DeleteTurnReply is the reply of delete_turn: how many entries went.
	DeleteTurnReply struct {
		Deleted int `json:"deleted"`
	}
	// ReportReply is the reply of report.
	ReportReply struct {
		// InboxID is the call's entry, new or the one a duplicate found.
		InboxID string `json:"inbox_id"`
		// State is the entry's state after the report: pending, acked or
		// stale.
		State State `json:"state"`
	}
)
