package jsstore

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
