package kit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas/internal/determ"
	"github.com/utpmesh/utpmesh/services/atlas/internal/state"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
)

// Bucket names the kit uses in every project.
const (
	bucketCalls   = "_calls"
	bucketPending = "_pending"
)

// callRecord is what an executed (or parked) call leaves behind, so that a
// second execution of the same call answers the same way.
type callRecord struct {
	ToolName string          `json:"tool_name"`
	ArgsHash string          `json:"args_hash"`
	Result   json.RawMessage `json:"result"`
	Receipt  receipts.Record `json:"receipt"`
}

func callKey(turn, toolCallID string) string { return turn + "\x00" + toolCallID }

func argsHash(args json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, args); err != nil {
		buf.Write(args)
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:8])
}

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
	hash := argsHash(x.Args)
	var prev *callRecord
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

	if sp.needsConfirm(x.Args) {
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
		return putCall(x, callRecord{ToolName: sp.Name, ArgsHash: hash, Result: value, Receipt: rec})
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
func getCall(x *Exec) (*callRecord, error) {
	v, found, err := x.Bucket(bucketCalls).Get(callKey(x.AgentTurnID, x.ToolCallID))
	if err != nil || !found {
		return nil, err
	}
	prev := &callRecord{}
	if err := json.Unmarshal(v, prev); err != nil {
		return nil, fmt.Errorf("call record of %s: %w", x.ToolCallID, err)
	}
	return prev, nil
}

// replay answers a call that already ran from its record, or refuses the
// reuse of its tool_call_id for another call.
func replay(sp *Spec, x *Exec, prev *callRecord, hash string) (json.RawMessage, receipts.Record, error) {
	if prev.ToolName != sp.Name || prev.ArgsHash != hash {
		return nil, receipts.Record{}, BadRequest("tool_call_id %q was already used in turn %q for a %s call with other arguments; give every call its own tool_call_id",
			x.ToolCallID, x.AgentTurnID, prev.ToolName)
	}
	return prev.Result, prev.Receipt, nil
}

func putCall(x *Exec, rec callRecord) error {
	b := x.Bucket(bucketCalls)
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return b.Put(callKey(x.AgentTurnID, x.ToolCallID), raw)
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

// PutNew stores a new object under id in b. When id exists with the same
// encoding it returns existed=true (a replay); with another encoding it
// fails bad_request explaining the tool_call_id reuse.
func PutNew(b state.Bucket, id string, v any, toolCallID string) (existed bool, err error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	old, found, err := b.Get(id)
	if err != nil {
		return false, err
	}
	if found {
		if bytes.Equal(old, raw) {
			return true, nil
		}
		return false, BadRequest("the id %s derived from tool_call_id %q already names another object: tool_call_id was reused with different content; give every call its own tool_call_id", id, toolCallID)
	}
	return false, b.Put(id, raw)
}

// GetJSON reads the JSON object under id into v; found is false when absent.
func GetJSON(b state.Bucket, id string, v any) (found bool, err error) {
	raw, found, err := b.Get(id)
	if err != nil || !found {
		return false, err
	}
	return true, json.Unmarshal(raw, v)
}

// PutJSON writes v under id.
func PutJSON(b state.Bucket, id string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(id, raw)
}

// Raw encodes v as JSON for a receipt change (nil on error, which cannot
// happen for the plain structs the services pass).
func Raw(v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return raw
}
