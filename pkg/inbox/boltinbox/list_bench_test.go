package boltinbox

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// BenchmarkList lists one agent's inbox at 10⁵ entries (one agent, ten
// entries per turn, 1% pending): its pending entries, one turn's entries,
// and the first page of its acked history.
func BenchmarkList(b *testing.B) {
	d, err := Open(filepath.Join(b.TempDir(), "inbox.db"), time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	const n = 100_000
	ctx := context.Background()
	// Seed in large transactions through the same writes as Insert and Ack.
	for start := 0; start < n; start += 10_000 {
		if err := d.bolt.Update(func(tx *bolt.Tx) error {
			for i := start; i < start+10_000; i++ {
				rep := &utp.Report{AgentID: "agent-a", AgentTurnID: fmt.Sprintf("turn-%d", i/10), ToolCallID: fmt.Sprintf("call-%d", i%10),
					TurnEpoch: 1, ToolResultCardID: card.NewID(), Status: card.StatusSuccess, AfterExecution: card.Suspend, ToolName: "echo"}
				e, _, err := insertTx(tx, "p1", "c1", rep, "")
				if err != nil {
					return err
				}
				if i%1000 != 999 {
					if _, err := applyAck(tx, "p1", []string{e.InboxID}, time.Now()); err != nil {
						return err
					}
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		q    inbox.ListQuery
		want int
	}{
		{"pending", inbox.ListQuery{AgentID: "agent-a", State: inbox.StatePending, Limit: inbox.MaxList}, n / 1000},
		{"turn", inbox.ListQuery{AgentID: "agent-a", AgentTurnID: "turn-4321", State: inbox.StateAll, Limit: inbox.MaxList}, 10},
		{"acked-page", inbox.ListQuery{AgentID: "agent-a", State: inbox.StateAcked, Limit: 100}, 100},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				es, err := d.List(ctx, "p1", tc.q)
				if err != nil {
					b.Fatal(err)
				}
				if len(es) != tc.want {
					b.Fatalf("listed %d entries, want %d", len(es), tc.want)
				}
			}
		})
	}
}
