package jsstore

import (
	"context"

	"github.com/nats-io/nats.go"
)

// SetLeaderReads forces the read paths of a replicated stream (reads of
// mutable records from the leader, "not found" confirmed at the leader,
// fenced turn index reads) on any store, so that a single-server test
// exercises them.
func SetLeaderReads(s *Store, on bool) { s.leaderReads = on }

// HoldCommitter makes the group committer look busy (as while a batch is
// in flight), so that Puts queue until ReleaseCommitter.
func HoldCommitter(s *Store) {
	s.cm.mu.Lock()
	s.cm.busy = true
	s.cm.mu.Unlock()
}

// Queued returns how many Puts wait for the committer.
func Queued(s *Store) int {
	s.cm.mu.Lock()
	defer s.cm.mu.Unlock()
	return len(s.cm.queue)
}

// ReleaseCommitter commits what queued meanwhile, as the end of a batch
// does.
func ReleaseCommitter(s *Store) {
	if s.next() {
		s.drain()
	}
}

// SetBeforeWrite makes fn run between the planning of every Put batch
// (Put, PutToolResult) and its publication, in the committer: where a
// concurrent writer makes the batch's compare-and-set fail. fn must not
// Put through s (the committer is busy with fn's batch).
func SetBeforeWrite(s *Store, fn func()) { s.beforeWrite = fn }

// PutRawClaim stores data as the claim record of key in project, as an
// older version of the store (or a corrupt one) would have.
func PutRawClaim(ctx context.Context, s *Store, project, key string, data []byte) error {
	_, err := s.publish(ctx, []*nats.Msg{rollup(record(s.lay.claim(project, key), data))})
	return err
}

// SetBeforeCommit makes fn run in every attempt of a write just before
// the message that commits it is sent (a batch's last message, or the
// single record), with the attempt's context; msgs are the write's
// messages. An error from fn ends the attempt without sending it (an
// error of ctx: as if it had gone unanswered).
func SetBeforeCommit(s *Store, fn func(ctx context.Context, msgs []*nats.Msg) error) {
	s.beforeCommit = fn
}

// SetDropAck makes every attempt of a write for which fn returns true
// behave as if its acknowledgement had been lost: the write was stored,
// and the attempt waits out its bound unanswered.
func SetDropAck(s *Store, fn func(msgs []*nats.Msg) bool) { s.dropAck = fn }
