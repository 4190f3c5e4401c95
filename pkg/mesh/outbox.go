package mesh

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/streams"
)

// A single node whose nats-server is embedded keeps its command and
// wakeup streams in JetStream's async persist mode
// (streams.WithAsyncPersist): a command or wakeup is acknowledged once the
// server has it in memory and reaches the disk within milliseconds (the
// file) and the sync interval (the fsync). What a crash of the process (or
// the machine) loses of their tails, the node file restores at the next
// start, because both were committed there before anyone was told they
// were sent:
//
//   - an admitted command is the call's outbox entry, stored with its
//     tool.call card (admit.Config.Outbox); replayOutbox publishes again
//     every entry that may have been lost;
//   - a wakeup's inbox entry is stored with its tool.result card;
//     inboxsvc.Config.RingMarkedSince rings again every pending entry
//     whose wakeup may have been lost.
//
// "May have been lost" is judged by the stream's last stored message:
// a stream loses a tail, never a message in its middle, so a message
// stored before the last one survived. A command lost was acknowledged
// after the last stored message arrived, and its entry was stamped at
// most a publish's time before (the entry is stamped before the publish
// starts; a wakeup's mark after its acknowledgement); replayMargin covers
// that and a clock step. What is published again that the stream has
// kept is dropped by its Nats-Msg-Id within the stream's duplicate window
// (two minutes) and otherwise delivered twice, which the call's claim
// and its one result make harmless (a wakeup twice: the agent's ack makes
// the second a no-op).

// replayMargin is how long before a stream's last stored message an
// outbox entry or wakeup mark may date and its message still be lost.
const replayMargin = time.Minute

// everything is the "lost since" of a stream that has never stored a
// message: every entry is replayed.
var everything = time.Unix(1, 0).UTC()

// asyncStreams reports whether this node keeps its command and wakeup
// streams in async persist mode: a single node with its nats-server
// embedded, so that a crash of the server is a crash of the node, whose
// next start replays what the server lost.
func (m *Mesh) asyncStreams() bool {
	return m.srv != nil && m.cfg.Cluster == nil && m.cfg.Replicated == nil && m.cfg.External == nil
}

// outboxPut is admit.Config.Outbox over the node file's CardStore.
func outboxPut(store *boltstore.Store) func(ctx context.Context, cc *card.Card, m *nats.Msg) error {
	return func(ctx context.Context, cc *card.Card, m *nats.Msg) error {
		return store.PutWithCommand(ctx, cc, boltstore.Message{Subject: m.Subject, Header: m.Header, Data: m.Data})
	}
}

// lostSince returns the time from which the stream's last messages may
// have been lost in a crash (its last stored message's, less
// replayMargin; everything for a stream that never stored one), and
// false when the stream fsyncs every message (it lost none).
func lostSince(ctx context.Context, js jetstream.JetStream, name string) (time.Time, bool, error) {
	ctx, cancel := deadline.Bound(ctx, 0)
	defer cancel()
	st, err := js.Stream(ctx, name)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("mesh: stream %s: %w", name, err)
	}
	info := st.CachedInfo()
	if info.Config.PersistMode != jetstream.AsyncPersistMode {
		return time.Time{}, false, nil
	}
	if info.State.LastSeq == 0 || info.State.LastTime.IsZero() {
		return everything, true, nil
	}
	return info.State.LastTime.Add(-replayMargin), true, nil
}

// replayOutbox publishes again, in the node file's order, every admitted
// command of a call without a result whose outbox entry dates from when
// the command stream may have lost it (lostSince). It returns how many
// it published; a publish that fails fails the start (the node cannot
// promise the calls it acknowledged otherwise).
func replayOutbox(ctx context.Context, js jetstream.JetStream, ver string, store *boltstore.Store) (int, error) {
	since, async, err := lostSince(ctx, js, streams.CommandStream(ver))
	if err != nil || !async {
		return 0, err
	}
	var entries []boltstore.OutboxEntry
	if err := store.Outbox(ctx, since, func(e boltstore.OutboxEntry) error {
		entries = append(entries, e)
		return nil
	}); err != nil {
		return 0, fmt.Errorf("mesh: read the outbox: %w", err)
	}
	for i, e := range entries {
		m := &nats.Msg{Subject: e.Message.Subject, Header: nats.Header(e.Message.Header), Data: e.Message.Data}
		pctx, cancel := deadline.Within(ctx, 0)
		_, err := js.PublishMsg(pctx, m)
		cancel()
		if err != nil {
			return i, fmt.Errorf("mesh: publish again the command of tool_call_id %s (turn %s, project %s) from the outbox: %w",
				e.ToolCallID, e.AgentTurnID, e.ProjectID, err)
		}
	}
	return len(entries), nil
}

// ringMarkedSince is inboxsvc.Config.RingMarkedSince for the node's
// wakeup stream: zero when the stream fsyncs every wakeup.
func ringMarkedSince(ctx context.Context, js jetstream.JetStream, ver string) (time.Time, error) {
	since, async, err := lostSince(ctx, js, streams.WakeupStream(ver))
	if err != nil || !async {
		return time.Time{}, err
	}
	return since, nil
}
