package boltstore

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// TestClaimTableEmpties: the table keeps an entry only while a key's lock
// is held or waited for, or its record is not written: after calls that
// ended with their results, claims a commit wrote, and failed lock waits,
// it is empty.
func TestClaimTableEmpties(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "cards.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	const calls = 64
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			c := storetest.ToolCallCard("p", "turn", fmt.Sprintf("c%d", i))
			if err := s.Put(ctx, c); err != nil {
				t.Error(err)
				return
			}
			req := cardstore.StartCallRequest{ProjectID: "p", AgentTurnID: "turn", ToolCallID: c.ToolCallID, ToolCallCardID: c.CardID,
				Holder: fmt.Sprintf("w%d", i), Lease: DefaultLockDelay}
			if _, err := s.StartCall(ctx, req); err != nil {
				t.Error(err)
				return
			}
			if i%2 == 0 { // half end with a result, half stay claimed
				if err := s.Put(ctx, storetest.ToolResultCard("p", "turn", c.ToolCallID, card.StatusSuccess)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// A wait for a held key that gives up leaves nothing behind.
	e, err := s.mem.lock(ctx, "p\x00toolcall/turn/held")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if _, err := s.mem.lock(short, "p\x00toolcall/turn/held"); err == nil {
		t.Fatal("a second lock of a held key succeeded")
	}
	s.unlockClaim(e)
	if err := s.Put(ctx, storetest.NoteCard("p", "other", "commit")); err != nil { // writes the claims left
		t.Fatal(err)
	}
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	if len(s.mem.entries) != 0 || len(s.mem.dirty) != 0 || s.mem.flushing {
		t.Fatalf("claim table after every call ended or was written: %d entries, %d dirty, flushing %v; want it empty",
			len(s.mem.entries), len(s.mem.dirty), s.mem.flushing)
	}
}
