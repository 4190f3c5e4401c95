package inbox

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// TestMarkSentFirstWins pins what keeps the wakeup observer from counting an
// entry twice: of concurrent markSent calls (a report and its duplicate
// racing), exactly one says it made the mark.
func TestMarkSentFirstWins(t *testing.T) {
	d, err := openDB(filepath.Join(t.TempDir(), "inbox.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.close() }()
	rep := &utp.Report{AgentID: "a1", AgentTurnID: "t1", TurnEpoch: 1, ToolCallID: "c1",
		ToolResultCardID: card.NewID(), Status: card.StatusSuccess, AfterExecution: card.Suspend}
	e, _, err := d.insert("p1", "main", rep, utp.NewTraceparent())
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		firsts int
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first, err := d.markSent("p1", e.InboxID, time.Now())
			if err != nil {
				t.Error(err)
				return
			}
			if first {
				mu.Lock()
				firsts++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firsts != 1 {
		t.Fatalf("markSent said first %d times of %d, want exactly 1", firsts, n)
	}
	got, err := d.get("p1", e.InboxID)
	if err != nil || got.WakeupSentAt == nil {
		t.Fatalf("entry after markSent: %+v, %v; want wakeup_sent_at set", got, err)
	}
}
