package kvinbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/utpmesh/utpmesh/internal/jskv"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// Insert stores the report's entry once per call: the first report of a
// call wins, a later one returns the stored entry (created false).
//
// On a bucket that takes atomic batches (OpenBucket turns them on) a new
// call's dedupe key, entry and index keys are one batch, each key
// expected absent: one replicated write, stored whole or not at all. A
// batch that is refused — the call has its dedupe key already, the
// stream takes no batches at the moment, the acknowledgement was lost —
// leaves the insert to the steps below, which find out which it was.
//
// Otherwise (and after such a refusal) the dedupe key is created first,
// then the entry and its indexes; a crash in between is repaired by the
// report's redelivery, which finds the key and finishes the insert with
// the id it names.
func (b *KV) Insert(ctx context.Context, project, channel string, rep *utp.Report, traceparent string) (*inbox.Entry, bool, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	if b.bk.Atomic() {
		e, stored, err := b.insertBatch(ctx, project, channel, rep, traceparent)
		if stored || err != nil {
			return e, stored, err
		}
	}
	return b.insertSteps(ctx, project, channel, rep, traceparent)
}

// callKey is the call's dedupe key.
func callKey(project string, rep *utp.Report) string {
	return "c." + project + "." + hashToken(project, rep.AgentTurnID, rep.ToolCallID)
}

// newRecord is the entry of a report inserted now with inbox id id.
func newRecord(id, project, channel string, rep *utp.Report, traceparent string, stale bool) *record {
	state := inbox.StatePending
	if stale {
		state = inbox.StateStale
	}
	return &record{Entry: inbox.Entry{
		InboxID: id, ProjectID: project, ChannelID: channel,
		AgentID: rep.AgentID, AgentTurnID: rep.AgentTurnID, TurnEpoch: rep.TurnEpoch,
		ToolCallID: rep.ToolCallID, ToolResultCardID: rep.ToolResultCardID,
		Status: rep.Status, AfterExecution: rep.AfterExecution,
		StepID: rep.StepID, ToolName: rep.ToolName,
		State: state, CreatedAt: time.Now().UTC(), Traceparent: traceparent,
	}}
}

// insertBatch writes a new call's keys in one atomic batch. stored is
// false, with a nil error, when the batch was refused or its outcome is
// unknown: the caller goes on with insertSteps.
func (b *KV) insertBatch(ctx context.Context, project, channel string, rep *utp.Report, traceparent string) (e *inbox.Entry, stored bool, err error) {
	turnTok := hashToken(project, rep.AgentTurnID)
	// Only set_epoch raises a turn's epoch, as in the bbolt file: a
	// report is judged against it and never moves it.
	highest, seen, err := b.readEpoch(ctx, project, turnTok)
	if err != nil {
		return nil, false, err
	}
	r := newRecord(card.NewID(), project, channel, rep, traceparent, seen && rep.TurnEpoch < highest)
	v, err := json.Marshal(r)
	if err != nil {
		return nil, false, fmt.Errorf("kvinbox: encode entry %s: %w", r.InboxID, err)
	}
	// The entry last: the batch's acknowledgement names its revision.
	pairs := []jskv.Pair{{Key: callKey(project, rep), Value: []byte(r.InboxID)}}
	for _, k := range indexKeys(r) {
		pairs = append(pairs, jskv.Pair{Key: k})
	}
	pairs = append(pairs, jskv.Pair{Key: entryKey(project, r.InboxID), Value: v})
	rev, err := b.bk.CreateAll(ctx, pairs)
	if err != nil {
		return nil, false, nil
	}
	now := b.staleIfBehind(ctx, turnTok, r)
	if now == r && r.State == inbox.StatePending {
		b.fresh.put(r, rev) // its wakeup's mark follows
	}
	return &now.Entry, true, nil
}

// insertSteps creates the call's dedupe key first, then the entry and its
// indexes, each a write of its own; it finishes an insert a crash (or a
// refused batch) left half done, and returns the call's entry when it
// has one.
func (b *KV) insertSteps(ctx context.Context, project, channel string, rep *utp.Report, traceparent string) (*inbox.Entry, bool, error) {
	turnTok := hashToken(project, rep.AgentTurnID)
	key := callKey(project, rep)
	id := card.NewID()
	if _, err := b.kv.Create(ctx, key, []byte(id)); err != nil {
		if !isConflict(err) {
			return nil, false, fmt.Errorf("kvinbox: dedupe key: %w", err)
		}
		existing, r, err := b.byCallKey(ctx, project, key)
		if err != nil || r != nil {
			return entryOf(r), false, err
		}
		// The first insert stopped after the dedupe key: finish it with
		// the id it chose.
		id = existing
	}
	highest, seen, err := b.readEpoch(ctx, project, turnTok)
	if err != nil {
		return nil, false, err
	}
	r := newRecord(id, project, channel, rep, traceparent, seen && rep.TurnEpoch < highest)
	v, err := json.Marshal(r)
	if err != nil {
		return nil, false, fmt.Errorf("kvinbox: encode entry %s: %w", id, err)
	}
	created := true
	if _, err := b.kv.Create(ctx, entryKey(project, id), v); err != nil {
		if !isConflict(err) {
			return nil, false, fmt.Errorf("kvinbox: write entry %s: %w", id, err)
		}
		// Written concurrently by the first insert or another one
		// finishing it: that one is the new entry, this a duplicate.
		e, gerr := b.settled(ctx, entryKey(project, id))
		if gerr != nil {
			return nil, false, gerr
		}
		var got record
		if err := json.Unmarshal(e.Value, &got); err != nil {
			return nil, false, fmt.Errorf("kvinbox: entry %s of project %s is corrupt: %w", id, project, err)
		}
		r, created = &got, false
	}
	if err := b.index(ctx, r); err != nil {
		return nil, false, err
	}
	if created {
		r = b.staleIfBehind(ctx, turnTok, r)
	}
	return &r.Entry, created, nil
}

// byCallKey reads the entry the existing dedupe key names (nil when the
// insert that created the key stopped before the entry) and, when there
// is one, restores its missing index keys and judges it against its
// turn's epoch, as a new entry is.
func (b *KV) byCallKey(ctx context.Context, project, key string) (string, *record, error) {
	v, err := b.settled(ctx, key)
	if err != nil {
		return "", nil, err
	}
	existing := string(v.Value)
	r, _, err := b.getRecord(ctx, project, existing)
	if err != nil || r == nil {
		return existing, nil, err
	}
	if err := b.index(ctx, r); err != nil {
		return "", nil, err
	}
	if r.State == inbox.StatePending {
		// An ack (or set_epoch) between the read and index deleted
		// the pending key index just wrote back: take it out again.
		if now, _, err := b.getRecord(ctx, project, existing); err == nil && now != nil && now.State != inbox.StatePending {
			_ = b.bk.Drop(ctx, pendingKey(r))
			return existing, now, nil
		}
	}
	// The insert that wrote it may have stopped (or lost its batch's
	// acknowledgement) before its own check.
	return existing, b.staleIfBehind(ctx, hashToken(project, r.AgentTurnID), r), nil
}

func entryOf(r *record) *inbox.Entry {
	if r == nil {
		return nil
	}
	return &r.Entry
}

// staleIfBehind judges r, just stored, against its turn's epoch once
// more: an epoch raised between Insert's check and its write must not
// leave a pending entry older than the turn's highest epoch (set_epoch
// raises the epoch before it looks for the turn's pending entries, and
// the entry's index keys were written before this read, so one of the
// two sees the other). It returns the entry as it now is.
func (b *KV) staleIfBehind(ctx context.Context, turnTok string, r *record) *record {
	if r.State != inbox.StatePending {
		return r
	}
	h, ok, err := b.readEpoch(ctx, r.ProjectID, turnTok)
	if err != nil || !ok || h <= r.TurnEpoch {
		return r
	}
	st, changed, err := b.update(ctx, r.ProjectID, r.InboxID, func(x *record) bool {
		if x.State != inbox.StatePending {
			return false
		}
		x.State = inbox.StateStale
		return true
	})
	if err != nil || !changed {
		return r
	}
	_ = b.bk.Drop(ctx, pendingKey(st))
	return st
}

func pendingKey(r *record) string { return "p." + r.ProjectID + "." + r.AgentID + "." + r.InboxID }
func agentKey(r *record) string   { return "a." + r.ProjectID + "." + r.AgentID + "." + r.InboxID }
func turnKey(r *record) string {
	return "u." + r.ProjectID + "." + hashToken(r.ProjectID, r.AgentTurnID) + "." + r.InboxID
}

// indexKeys lists the entry's index keys: its agent's and its turn's,
// and its agent's pending index while it is pending.
func indexKeys(r *record) []string {
	keys := []string{agentKey(r), turnKey(r)}
	if r.State == inbox.StatePending {
		keys = append(keys, pendingKey(r))
	}
	return keys
}

// index creates the entry's index keys that do not exist yet
// (idempotent), at once: they are independent, and each is a replicated
// write (a round trip to the bucket's leader and its quorum). It never
// rewrites one: an agent key's stream sequence is the entry's place in
// the agent's listing (List), so a rewrite would move an entry a reader
// has paged past to the end, listing it twice.
func (b *KV) index(ctx context.Context, r *record) error {
	keys := indexKeys(r)
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			if _, err := b.kv.Create(ctx, k, nil); err != nil && !isConflict(err) {
				errs[i] = fmt.Errorf("kvinbox: index %s: %w", k, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
