package booking

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// BucketCalls is the project's bucket of call records: one per
// state-changing tool call, under toolkit.CallKey(turn, tool_call_id),
// written in the transaction that commits the call's change.
const BucketCalls = "_calls"

// Record is the call record a state-changing tool call writes with its
// change. Given to a call's ctx (WithRecord), the first write transaction
// of the store that runs under that ctx and commits a change — through
// Create, Update, Transition or State().Update, whoever calls them —
// also stores the record, in that same transaction; it refuses to run
// (ErrRecorded) when the call's record is already stored. So a call's
// change is applied once: a repeat finds the record and answers from it.
type Record struct {
	// Project, Turn and ToolCallID name the call; Tool and ArgsHash
	// (toolkit.ArgsHash) are kept to refuse a reuse of the id with other
	// arguments (toolkit.CallRecord.Replay).
	Project, Turn, ToolCallID, Tool, ArgsHash string
	// Result builds the call's result inside the transaction, after the
	// change was made (it may read what the transaction wrote). A nil
	// value means this transaction is not the call's change (a refusal
	// logged before the call fails): no record is written with it.
	Result func(tx state.Tx) (any, error)

	mu      sync.Mutex
	written json.RawMessage
}

// Written is the result stored with the call's change, once a
// transaction committed it (nil before).
func (r *Record) Written() json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.written
}

func (r *Record) setWritten(raw json.RawMessage) {
	r.mu.Lock()
	r.written = raw
	r.mu.Unlock()
}

type recordKey struct{}

// WithRecord returns ctx carrying r: the store's first write transaction
// under it stores r with its change (see Record).
func WithRecord(ctx context.Context, r *Record) context.Context {
	return context.WithValue(ctx, recordKey{}, r)
}

func recordOf(ctx context.Context) *Record {
	r, _ := ctx.Value(recordKey{}).(*Record)
	return r
}

// Recorded reads the stored record of r's call: nil when the call has
// not changed anything yet.
func (s *Store) Recorded(ctx context.Context, r *Record) (*toolkit.CallRecord, error) {
	var rec *toolkit.CallRecord
	err := s.st.View(ctx, func(tx state.Tx) error {
		var err error
		rec, err = toolkit.GetCall(tx.Bucket(r.Project, BucketCalls), r.Turn, r.ToolCallID)
		return err
	})
	return rec, s.err(err)
}

// recording is the store's state.Store: its Update writes the call record
// of its ctx (WithRecord) with the call's change.
type recording struct{ state.Store }

var _ state.Store = recording{}

func (s recording) Update(ctx context.Context, fn func(state.Tx) error) error {
	r := recordOf(ctx)
	if r == nil || r.Result == nil || r.Written() != nil {
		return s.Store.Update(ctx, fn)
	}
	var raw json.RawMessage
	err := s.Store.Update(ctx, func(tx state.Tx) error {
		raw = nil // the closure may run again
		calls := tx.Bucket(r.Project, BucketCalls)
		prev, err := toolkit.GetCall(calls, r.Turn, r.ToolCallID)
		if err != nil {
			return err
		}
		if prev != nil {
			return fmt.Errorf("%w: call %s of turn %s (%s)", ErrRecorded, r.ToolCallID, r.Turn, prev.ToolName)
		}
		if err := fn(tx); err != nil {
			return err
		}
		v, err := r.Result(tx)
		if err != nil || v == nil {
			return err
		}
		if raw, err = json.Marshal(v); err != nil {
			return fmt.Errorf("booking: encode the result of call %s: %w", r.ToolCallID, err)
		}
		return toolkit.PutCall(calls, r.Turn, r.ToolCallID, toolkit.CallRecord{ToolName: r.Tool, ArgsHash: r.ArgsHash, Result: raw})
	})
	if err == nil && raw != nil {
		r.setWritten(raw)
	}
	return err
}
