package boltstore_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
)

type commits struct {
	mu       sync.Mutex
	txs      int
	requests int
	maxGroup int
}

func (c *commits) Committed(requests int, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.txs++
	c.requests += requests
	c.maxGroup = max(c.maxGroup, requests)
	if d <= 0 {
		panic("commit duration must be positive")
	}
}

// TestCommitObserver: every successful write request is counted in exactly
// one observed commit, with or without group commit.
func TestCommitObserver(t *testing.T) {
	for _, group := range []bool{true, false} {
		t.Run(fmt.Sprintf("group=%v", group), func(t *testing.T) {
			obs := &commits{}
			s, _ := openStore(t, boltstore.WithCommitObserver(obs), boltstore.WithGroupCommit(group))
			const writers, each = 8, 10
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						if err := s.Put(t.Context(), storetest.NoteCard("p", fmt.Sprintf("turn-%d", w), fmt.Sprint(i))); err != nil {
							t.Error(err)
						}
					}
				}()
			}
			wg.Wait()
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if obs.requests != writers*each {
				t.Fatalf("observed requests = %d, want %d", obs.requests, writers*each)
			}
			if !group && obs.maxGroup != 1 {
				t.Fatalf("without group commit the group size must be 1, saw %d", obs.maxGroup)
			}
			if obs.txs > obs.requests {
				t.Fatalf("%d transactions for %d requests", obs.txs, obs.requests)
			}
		})
	}
}
