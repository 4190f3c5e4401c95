package boltstore

import (
	"encoding/json"
)

// SetAwaitHook makes StartCall call f just before it waits for an
// announced Put (tests use it to act while the wait is under way).
func SetAwaitHook(s *Store, f func()) { s.awaitHook = f }

// WaitingWrites returns how many writes wait for company in the store's
// committer (boltfile.Committer.Waiting).
func WaitingWrites(s *Store) int { return s.commits.Waiting() }

// TurnMemoAgrees checks that what this process's memo remembers for a
// turn record's stored bytes, if anything, encodes as those bytes decode.
func TurnMemoAgrees(key, data []byte) error {
	var r turnRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return err
	}
	return turnRecords.Agrees(key, data, r, func(r turnRecord) ([]byte, error) { return json.Marshal(r) })
}
