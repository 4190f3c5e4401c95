package boltstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// The outbox (issue 27, decision 2(a)): the command a tool.call card's
// commit promises to publish, stored in that commit. A node whose command
// stream acknowledges before its fsync (streams.WithAsyncPersist) can lose
// the last commands it acknowledged when it crashes; the outbox still has
// them, and the node publishes them again at its next start
// (pkg/mesh). An entry lives as long as its call has no result: the
// commit of the call's tool.result card deletes it, as does DeleteTurn.
//
// Bucket outbox (schema version 3): outboxKey(project, agent_turn_id,
// tool_call_id) → the JSON of an OutboxEntry. It has a bucket of its own
// (not among the turn's records) so that a node's start reads only the
// calls in flight.

// Message is a NATS message an outbox entry publishes.
type Message struct {
	Subject string              `json:"subject"`
	Header  map[string][]string `json:"header,omitempty"`
	Data    []byte              `json:"data"`
}

// OutboxEntry is the command of one call whose tool.call card is stored
// and that has no result yet.
type OutboxEntry struct {
	ProjectID   string `json:"project_id"`
	AgentTurnID string `json:"agent_turn_id"`
	ToolCallID  string `json:"tool_call_id"`
	// At is when the Put that stored it was asked for (the store clock):
	// before the command's publish began.
	At      time.Time `json:"at"`
	Message Message   `json:"message"`
}

// PutWithCommand is Put of one tool.call card that also stores, in the
// same commit, the command m that publishes the call: the call's outbox
// entry. When the card is stored already (a repeat of the same bytes) the
// commit writes nothing, the entry included; a card with other bytes is
// cardstore.ErrConflict as for Put. The card must be a tool.call card of
// a turn (ErrInvalid otherwise). Its commit may wait up to the dispatch
// linger (WithDispatchLinger) for another write to share it.
func (s *Store) PutWithCommand(ctx context.Context, c *card.Card, m Message) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	if s.closing.Load() {
		return cardstore.ErrClosed
	}
	if c == nil || c.Type != card.TypeToolCall || c.Metadata.AgentTurnID == "" || c.ToolCallID == "" {
		return fmt.Errorf("%w: PutWithCommand takes a tool.call card with an agent_turn_id and a tool_call_id", cardstore.ErrInvalid)
	}
	if m.Subject == "" {
		return fmt.Errorf("%w: PutWithCommand: the command has no subject", cardstore.ErrInvalid)
	}
	var (
		pcs  []putCard
		size int
		err  error
	)
	if pc, ok := s.pending.prepared(c); ok {
		pcs, size = []putCard{pc}, len(pc.Data) // AnnouncePut encoded it
	} else if pcs, size, err = s.preparePut([]*card.Card{c}); err != nil {
		return err
	}
	e := OutboxEntry{ProjectID: c.ProjectID, AgentTurnID: c.Metadata.AgentTurnID, ToolCallID: c.ToolCallID,
		At: s.cfg.clock().UTC(), Message: m}
	val, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("boltstore: encode the outbox entry of card %s: %w", c.CardID, err)
	}
	key, rkey := outboxKey(e.ProjectID, e.AgentTurnID, e.ToolCallID), resultKey(e.ProjectID, e.AgentTurnID, e.ToolCallID)
	return s.writeSoon(ctx, size+len(val), func(b *buckets) error {
		existed := b.cards.Get(pcs[0].key) != nil
		if err := applyPut(b, pcs, nil); err != nil {
			return err
		}
		if existed || b.recs.Get(rkey) != nil {
			return nil
		}
		if err := b.outbox.Put(key, val); err != nil {
			return dirty(fmt.Errorf("boltstore: write the outbox entry of card %s: %w", c.CardID, err))
		}
		return nil
	})
}

// Outbox calls fn with every outbox entry stored at or after since, in
// key order (project, turn, call), from one read transaction: the commands
// of calls without a result, for a node to publish again after a crash.
// An entry that cannot be decoded is an error (the file was changed behind
// the store's back).
func (s *Store) Outbox(ctx context.Context, since time.Time, fn func(OutboxEntry) error) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	return s.view(func(b *buckets) error {
		return b.outbox.ForEach(func(k, v []byte) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			var e OutboxEntry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("boltstore: outbox entry %q: %w", k, err)
			}
			if e.At.Before(since) {
				return nil
			}
			return fn(e)
		})
	})
}

// OutboxLen returns the number of outbox entries (calls with a stored
// command and no result yet).
func (s *Store) OutboxLen(ctx context.Context) (int, error) {
	if err := checkCtx(ctx); err != nil {
		return 0, err
	}
	n := 0
	err := s.view(func(b *buckets) error { n = b.outbox.Stats().KeyN; return nil })
	return n, err
}

// deleteOutbox removes the outbox entry of a call, if any (bbolt's
// Delete of a missing key changes nothing).
func deleteOutbox(b *buckets, key []byte) error { return b.outbox.Delete(key) }
