package kit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas/internal/determ"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// Bucket names the kit uses in every project.
const (
	bucketCalls   = "_calls"
	bucketPending = "_pending"
)

// newExec builds the Exec of a worker call.
func (s *Service) newExec(call *worker.Call) *Exec {
	return &Exec{
		Project: call.ProjectID, Channel: call.ChannelID, Version: call.Version,
		ToolCallID: call.Command.ToolCallID, AgentTurnID: call.Command.AgentTurnID, AgentID: call.Command.AgentID,
		Time: determ.Time(call.CallCard.CreatedAt), Args: call.Arguments, Call: call, Svc: s,
	}
}

func (s *Service) handler(sp *Spec) worker.HandlerFunc {
	return func(ctx context.Context, call *worker.Call) (worker.Result, error) {
		if err := s.Refused(); err != nil {
			return worker.Result{}, worker.Fail(card.CodeUpstreamUnavailable, err.Error())
		}
		_, st, err := s.deps.Conn(ctx)
		if err != nil {
			return worker.Result{}, worker.Fail(card.CodeUpstreamUnavailable, "atlas."+s.group+": the CardStore is not available: "+err.Error())
		}
		x := s.newExec(call)
		entry := receipts.ToolCall{ToolName: sp.Name, Args: call.Arguments, TimestampUTC: x.Now(),
			ToolCallID: x.ToolCallID, AgentTurnID: x.AgentTurnID}
		value, rec, herr := s.execute(ctx, sp, x, entry)
		if errors.Is(herr, worker.ErrRetryLater) {
			return worker.Result{}, herr // the outcome is unknown: the redelivery reads it back
		}
		if herr != nil {
			var ce *card.Error
			if !errors.As(herr, &ce) {
				ce = &card.Error{Code: card.CodeInternalError, Message: herr.Error()}
				herr = ce
			}
			rec = receipts.Record{Kind: receipts.KindCall, ToolCall: entry,
				Errors: []receipts.Error{{Code: string(ce.Code), Message: ce.Message}}}
			rec.ToolCall.Status, rec.ToolCall.Result = receipts.StatusFailed, json.RawMessage("null")
		}
		if werr := receipts.Write(ctx, st, call.CallCard, s.Author(), rec, x.Time); werr != nil {
			if herr == nil && !sp.ReadOnly {
				// The change is committed with its call record: failing
				// the call now would report a done change as failed (and
				// an agent that retries under a new id would apply it
				// twice). Run the call again later instead: the
				// redelivery answers from the call record and writes
				// this same receipt.
				return worker.Result{}, fmt.Errorf("%w: %s: the change was applied but its receipt could not be written (%v)",
					worker.ErrRetryLater, sp.Name, werr)
			}
			return worker.Result{}, worker.Fail(card.CodeUpstreamUnavailable,
				fmt.Sprintf("%s: the receipt could not be written (%v); nothing was changed", sp.Name, werr))
		}
		if herr != nil {
			return worker.Result{}, herr
		}
		return worker.OK(value), nil
	}
}

// execute runs one call and returns its result and receipt record.
func (s *Service) execute(ctx context.Context, sp *Spec, x *Exec, entry receipts.ToolCall) (json.RawMessage, receipts.Record, error) {
	if sp.Direct != nil {
		out, err := sp.Direct(ctx, x)
		if err != nil {
			return nil, receipts.Record{}, err
		}
		return s.finish(ctx, sp, entry, out)
	}
	if sp.ReadOnly {
		var out Outcome
		err := s.st.View(ctx, func(tx state.Tx) error {
			x.Tx = tx
			var err error
			out, err = sp.Run(x)
			return err
		})
		if err != nil {
			return nil, receipts.Record{}, s.txErr(ctx, err)
		}
		return s.finish(ctx, sp, entry, out)
	}

	// Replays answer from the call record.
	hash := toolkit.ArgsHash(x.Args)
	var prev *toolkit.CallRecord
	if err := s.st.View(ctx, func(tx state.Tx) error {
		x.Tx = tx
		var err error
		prev, err = getCall(x) // a View may run its closure again
		return err
	}); err != nil {
		return nil, receipts.Record{}, s.txErr(ctx, err)
	}
	if prev != nil {
		return replay(sp, x, prev, hash)
	}

	if toolkit.NeedsConfirm(sp.Confirmation, sp.Count, x.Args) {
		return s.park(ctx, sp, x, entry, hash)
	}
	var out Outcome
	var value json.RawMessage
	var rec receipts.Record
	err := s.st.Update(ctx, func(tx state.Tx) error {
		x.Tx = tx
		// The record is read again in the transaction that would write
		// it: a commit whose outcome was unknown, retried, or another
		// execution of the same call may have recorded the call since.
		var err error
		if prev, err = getCall(x); err != nil || prev != nil {
			return err
		}
		if out, err = sp.Run(x); err != nil {
			return err
		}
		if value, rec, err = s.record(sp, entry, out); err != nil {
			return err
		}
		return putCall(x, sp.Name, hash, value, rec)
	})
	if err != nil {
		return nil, receipts.Record{}, s.txErr(ctx, err)
	}
	if prev != nil {
		return replay(sp, x, prev, hash)
	}
	if out.After != nil {
		if err := out.After(ctx); err != nil {
			return nil, receipts.Record{}, worker.Fail(card.CodeUpstreamUnavailable, err.Error())
		}
	}
	return value, rec, nil
}

// finish encodes the result and record of a call without a transaction.
func (s *Service) finish(ctx context.Context, sp *Spec, entry receipts.ToolCall, out Outcome) (json.RawMessage, receipts.Record, error) {
	value, rec, err := s.record(sp, entry, out)
	if err != nil {
		return nil, receipts.Record{}, err
	}
	if out.After != nil {
		if err := out.After(ctx); err != nil {
			return nil, receipts.Record{}, worker.Fail(card.CodeUpstreamUnavailable, err.Error())
		}
	}
	return value, rec, nil
}

// record encodes a successful outcome as the call's result (with "undo"
// for mutating tools) and its receipt record.
func (s *Service) record(sp *Spec, entry receipts.ToolCall, out Outcome) (json.RawMessage, receipts.Record, error) {
	value, err := EncodeResult(out.Result, !sp.ReadOnly && sp.Direct == nil, out.Undo)
	if err != nil {
		return nil, receipts.Record{}, err
	}
	entry.Status, entry.Result = receipts.StatusOK, value
	return value, receipts.Record{Kind: receipts.KindCall, ToolCall: entry, Changes: out.Changes, Undo: out.Undo, Warnings: out.Warnings}, nil
}

// EncodeResult encodes a result object, adding "undo" (null when undo is
// nil) when withUndo is set.
func EncodeResult(result any, withUndo bool, undo *receipts.Undo) (json.RawMessage, error) {
	raw, err := json.Marshal(result)
	if err != nil {
		return nil, fmt.Errorf("atlas: encode result: %w", err)
	}
	if !withUndo {
		return raw, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("atlas: a mutating tool's result must be an object: %w", err)
	}
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	u, err := json.Marshal(undo)
	if err != nil {
		return nil, fmt.Errorf("atlas: encode undo: %w", err)
	}
	m["undo"] = u
	return json.Marshal(m)
}

// getCall reads the call record of x's call; nil when there is none.
func getCall(x *Exec) (*toolkit.CallRecord, error) {
	return toolkit.GetCall(x.Bucket(bucketCalls), x.AgentTurnID, x.ToolCallID)
}

// replay answers a call that already ran from its record, or refuses the
// reuse of its tool_call_id for another call.
func replay(sp *Spec, x *Exec, prev *toolkit.CallRecord, hash string) (json.RawMessage, receipts.Record, error) {
	if err := prev.Replay(sp.Name, hash, x.AgentTurnID, x.ToolCallID); err != nil {
		return nil, receipts.Record{}, err
	}
	var rec receipts.Record
	if err := json.Unmarshal(prev.Receipt, &rec); err != nil {
		return nil, receipts.Record{}, fmt.Errorf("call record of %s: receipt: %w", x.ToolCallID, err)
	}
	return prev.Result, rec, nil
}

// putCall stores the call record of x's call with its receipt.
func putCall(x *Exec, tool, hash string, value json.RawMessage, rec receipts.Record) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return toolkit.PutCall(x.Bucket(bucketCalls), x.AgentTurnID, x.ToolCallID,
		toolkit.CallRecord{ToolName: tool, ArgsHash: hash, Result: value, Receipt: raw})
}

// txErr passes *card.Error through and wraps storage errors. An error
// that says nothing about the call itself — a commit whose outcome is
// unknown, a store that did not answer in time (while the call's own ctx
// still runs), too many concurrent writers — asks for the call to run again
// later (worker.ErrRetryLater): the replicated state loses a node or its
// leader for seconds, and such a call must neither fail nor apply twice.
func (s *Service) txErr(ctx context.Context, err error) error {
	var ce *card.Error
	if errors.As(err, &ce) {
		return ce
	}
	if errors.Is(err, state.ErrUnknownOutcome) {
		// Whether the change was stored is unknown: run the call again
		// later, which reads the call record back (applied: its answer;
		// not: it runs).
		return fmt.Errorf("%w: atlas.%s: %w", worker.ErrRetryLater, s.group, err)
	}
	if ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, state.ErrConflict)) {
		return fmt.Errorf("%w: atlas.%s: storage: %w", worker.ErrRetryLater, s.group, err)
	}
	if errors.Is(err, state.ErrClosed) {
		err = ErrClosed
	}
	return fmt.Errorf("atlas.%s: storage: %w", s.group, err)
}
