package jsstore

// SetLeaderReads forces the read paths of a replicated stream (reads of
// mutable records from the leader, "not found" confirmed at the leader,
// fenced turn index reads) on any store, so that a single-server test
// exercises them.
func SetLeaderReads(s *Store, on bool) { s.leaderReads = on }
