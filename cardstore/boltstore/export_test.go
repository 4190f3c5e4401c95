package boltstore

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// SetAwaitHook makes StartCall call f just before it waits for an
// announced Put (tests use it to act while the wait is under way).
func SetAwaitHook(s *Store, f func()) { s.awaitHook = f }

// TurnMemoAgrees checks that what this process's memo remembers for a
// turn record's stored bytes, if anything, encodes as those bytes decode.
func TurnMemoAgrees(key, data []byte) error {
	m, ok := turnRecords.Get(key, data)
	if !ok {
		return nil
	}
	var r turnRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return err
	}
	got, _ := json.Marshal(m)
	want, _ := json.Marshal(r)
	if !bytes.Equal(got, want) {
		return fmt.Errorf("turn record %q: the memo holds %s for bytes that decode to %s", key, got, want)
	}
	return nil
}
