package inbox

import (
	"context"
	"time"

	"github.com/utpmesh/utpmesh/pkg/utp"
)

// Backend is where the inbox service (inboxsvc) keeps its entries: a bbolt
// file (boltinbox, the default) or a JetStream key-value bucket (kvinbox,
// for a mesh whose state must survive the loss of a node). Both run one
// conformance suite, inboxtest.Run.
//
// The service validates every argument before it calls a Backend (project
// and agent ids are subject tokens, inbox ids canonical UUIDs, a ListQuery
// is normalized, epochs are not negative); a Backend checks nothing of the
// request itself. Every id a method takes is scoped by its project: nothing
// one project does reaches another's entries.
type Backend interface {
	// Insert stores the entry of an accepted report, or finds the call's
	// existing one: one entry per (project, agent_turn_id, tool_call_id),
	// whatever the epoch or body of a second report. created is true only
	// for the call that made the entry. A new entry is stale when the
	// turn's epoch (raised only by SetEpoch) is higher than the report's
	// turn_epoch, pending otherwise; a report never moves the epoch.
	Insert(ctx context.Context, project, channel string, rep *utp.Report, traceparent string) (e *Entry, created bool, err error)
	// MarkSentLater records that the entry's wakeup was published at at
	// (the first mark wins), without a durable write of its own if the
	// backend can defer it, and calls done once it is written: first is
	// true for exactly one of the marks of an entry. An unknown entry is
	// an error matching ErrNotFound.
	MarkSentLater(project, inboxID string, at time.Time, done func(first bool, err error))
	// Get returns the entry, or an error matching ErrNotFound.
	Get(ctx context.Context, project, inboxID string) (*Entry, error)
	// List returns the agent's entries matching q (normalized: State and
	// Limit set) in creation order. An After that is not one of the
	// agent's entries is an error matching ErrNotFound.
	List(ctx context.Context, project string, q ListQuery) ([]Entry, error)
	// Ack marks the pending entries among inboxIDs acked at at and returns
	// how many were pending, all or none: an id with no entry fails the
	// whole call with NotFound. Acked and stale entries are left as they
	// are.
	Ack(ctx context.Context, project string, inboxIDs []string, at time.Time) (int, error)
	// AckLater is Ack that may return before the ack is durable (it rides
	// along with the next write, if the backend has such a thing): the ids
	// are checked and the pending ones counted now, reads show the entries
	// acked at once, and done (when not nil) is called once the ack is
	// written or has failed.
	AckLater(ctx context.Context, project string, inboxIDs []string, at time.Time, done func(error)) (int, error)
	// SetEpoch raises the turn's highest epoch to epoch (never lowers it)
	// and turns the turn's pending entries of older epochs stale. It
	// returns the highest epoch after the call and the entries it made
	// stale.
	SetEpoch(ctx context.Context, project, agentTurnID string, epoch int64) (highest int64, staled []Entry, err error)
	// DeleteTurn removes the turn's entries (acked and stale), its
	// dedupe keys and its epoch, for retention, and returns how many
	// entries it removed (0 for a turn with none: no error). A pending
	// entry in the turn (as written: a lazy ack not yet committed does
	// not count) fails it with ErrPending and removes nothing.
	DeleteTurn(ctx context.Context, project, agentTurnID string) (int, error)
	// Pending returns how many entries are pending, across every project.
	Pending(ctx context.Context) (int, error)
	// Close writes what is queued (wakeup marks, lazy acks) and releases
	// the backend; later calls fail with ErrClosed (or do nothing).
	Close() error
}
