package boltstore

// SetAwaitHook makes StartCall call f just before it waits for an
// announced Put (tests use it to act while the wait is under way).
func SetAwaitHook(s *Store, f func()) { s.awaitHook = f }
