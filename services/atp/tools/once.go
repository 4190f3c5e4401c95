package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// Exactly once: every tool that changes the service's state runs through
// once. Its change and its call record (booking.Record: the result, under
// the call's turn and tool_call_id) commit in one transaction, so:
//
//   - a call already applied (a redelivery, a retry after an unknown
//     outcome) answers from its record and changes nothing; the same ids
//     with other arguments fail bad_request (tool_call_id reuse);
//   - a commit whose outcome is unknown (state.ErrUnknownOutcome), a
//     store that did not answer in time while the call's ctx still runs,
//     or too many concurrent writers, is not a failure: the call runs again
//     later (worker.ErrRetryLater), and the repeat reads the record first
//     (applied: its answer; not: it runs);
//   - a call that changed nothing fails as before (no record).
//
// What cannot be undone outside the state is not covered: a notification
// whose log entry's commit had an unknown outcome and was not stored is
// sent again by the repeat (with the same notification_id, which the
// provider sees).

// recorded is how a state-changing tool names its result: result builds
// it inside the transaction of the change (nil: that transaction is not
// the call's change).
type recorded func(tx state.Tx) (any, error)

// resultMap records the result a tool's transaction closure leaves in
// *out (nil while it has not run, or when it refused the call).
func resultMap(out *map[string]any) recorded {
	return func(state.Tx) (any, error) {
		if *out == nil {
			return nil, nil
		}
		return *out, nil
	}
}

type recordKey struct{}

// setResult gives the call's record (if the call runs under once) the
// function that builds its result in the change's transaction. A tool
// calls it before its write.
func setResult(ctx context.Context, result recorded) {
	if r, _ := ctx.Value(recordKey{}).(*booking.Record); r != nil {
		r.Result = result
	}
}

// once runs the state-changing tool run for call c at most once (see
// above).
func (s *Service) once(run func(ctx context.Context, c *worker.Call) (any, error)) func(ctx context.Context, c *worker.Call) (any, error) {
	return func(ctx context.Context, c *worker.Call) (any, error) {
		r := &booking.Record{Project: c.ProjectID, Turn: c.Command.AgentTurnID, ToolCallID: c.Command.ToolCallID,
			Tool: c.ToolName, ArgsHash: toolkit.ArgsHash(c.Arguments)}
		if v, done, err := s.replay(ctx, r); done || err != nil {
			return v, err
		}
		rctx := context.WithValue(booking.WithRecord(ctx, r), recordKey{}, r)
		v, err := run(rctx, c)
		if errors.Is(err, booking.ErrRecorded) {
			// Applied meanwhile (another delivery of the call): its answer.
			if v, done, err := s.replay(ctx, r); done || err != nil {
				return v, err
			}
		}
		if err != nil {
			return nil, retryable(ctx, c, err)
		}
		if raw := r.Written(); raw != nil {
			return raw, nil // the result as recorded: a repeat answers the same bytes
		}
		return v, nil
	}
}

// replay answers call r from its record; done is false when there is none.
func (s *Service) replay(ctx context.Context, r *booking.Record) (any, bool, error) {
	prev, err := s.store.Recorded(ctx, r)
	if err != nil {
		return nil, false, retryable(ctx, nil, err)
	}
	if prev == nil {
		return nil, false, nil
	}
	if err := prev.Replay(r.Tool, r.ArgsHash, r.Turn, r.ToolCallID); err != nil {
		return nil, true, err
	}
	return json.RawMessage(prev.Result), true, nil
}

// retryable turns an error that says nothing about the call itself into
// worker.ErrRetryLater: a commit whose outcome is unknown, a store that
// did not answer while the call's ctx still runs, too many concurrent
// writers. The replicated state loses a node or its leader for seconds;
// such a call must neither fail nor apply twice.
func retryable(ctx context.Context, c *worker.Call, err error) error {
	tool := "atp"
	if c != nil {
		tool = c.ToolName
	}
	if errors.Is(err, state.ErrUnknownOutcome) {
		return fmt.Errorf("%w: %s: whether the change was stored is unknown; the repeat reads its record: %w", worker.ErrRetryLater, tool, err)
	}
	if ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, state.ErrConflict)) {
		return fmt.Errorf("%w: %s: storage: %w", worker.ErrRetryLater, tool, err)
	}
	return err
}
