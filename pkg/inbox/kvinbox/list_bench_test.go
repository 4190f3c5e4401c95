package kvinbox

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/jskv/jskvtest"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
)

// seedList writes n entries of agent-a straight into the bucket's layout
// as Insert and Ack leave it (asynchronous publishes: seeding through
// Insert would take minutes), ten per turn, the last of every hundredth
// turn pending, the others acked (no pending key, as Ack leaves them),
// and returns their inbox ids in creation order. It is also what a
// bucket written by the version before the listing walk holds: the same
// keys.
func seedList(tb testing.TB, b *KV, js jetstream.JetStream, n int) []string {
	tb.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, "KV_"+b.kv.Bucket())
	if err != nil {
		tb.Fatal(err)
	}
	pre := "$KV." + b.kv.Bucket() + "."
	now := time.Now().UTC()
	ids := make([]string, 0, n)
	for i := 0; i < n; i++ {
		if i%500 == 0 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				tb.Fatal("seeding stalled")
			}
		}
		turn := fmt.Sprintf("turn-%d", i/10)
		r := &record{Entry: inbox.Entry{InboxID: card.NewID(), ProjectID: "p1", ChannelID: "c1", AgentID: "agent-a",
			AgentTurnID: turn, TurnEpoch: 1, ToolCallID: fmt.Sprintf("call-%d", i%10), ToolResultCardID: card.NewID(),
			Status: card.StatusSuccess, AfterExecution: card.Suspend, ToolName: "echo", State: inbox.StateAcked,
			CreatedAt: now.Add(time.Duration(i) * time.Microsecond)}}
		if i%1000 == 999 {
			r.State = inbox.StatePending
		} else {
			t := r.CreatedAt
			r.AckedAt = &t
		}
		ids = append(ids, r.InboxID)
		v, _ := json.Marshal(r)
		pubs := []struct {
			key string
			val []byte
		}{
			{"c.p1." + hashToken("p1", turn, r.ToolCallID), []byte(r.InboxID)},
			{entryKey("p1", r.InboxID), v}, {agentKey(r), nil}, {turnKey(r), nil},
		}
		if r.State == inbox.StatePending {
			pubs = append(pubs, struct {
				key string
				val []byte
			}{pendingKey(r), nil})
		}
		for _, p := range pubs {
			if _, err := js.PublishAsync(pre+p.key, p.val); err != nil {
				tb.Fatal(err)
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		tb.Fatal("seeding did not complete")
	}
	if _, err := st.Info(ctx); err != nil {
		tb.Fatal(err)
	}
	return ids
}

// BenchmarkList lists one agent's inbox at 10⁵ entries (one agent, ten
// entries per turn, 1% pending), on one server (R1) and on a 3-node
// cluster (R3, the client on a node that is not the bucket's leader when
// one can be found): its pending entries (what a runtime resuming after a
// restart and `turns ls --pending` read), one turn's pending entries (the
// agent's Resume and `turns resume`), the first page of 100 entries, and
// of its acked history the first page and a page in the middle (the 500th
// of 1,000).
func BenchmarkList(b *testing.B) {
	const n = 100_000
	for _, mode := range []string{"single", "cluster"} {
		b.Run(mode, func(b *testing.B) {
			var js jetstream.JetStream
			replicas := 1
			if mode == "single" {
				var err error
				if js, err = jetstream.New(meshtest.Conn(b, meshtest.NATS(b))); err != nil {
					b.Fatal(err)
				}
			} else {
				c := jskvtest.Start(b)
				js, replicas = c.JetStream(b, 0), 3
				if _, err := OpenBucket(context.Background(), js, "inbox_bench", replicas); err != nil {
					b.Fatal(err)
				}
				si, err := js.Stream(context.Background(), "KV_inbox_bench")
				if err != nil {
					b.Fatal(err)
				}
				for i, s := range c.Servers {
					if cl := si.CachedInfo().Cluster; cl != nil && s.Name() != cl.Leader {
						js = c.JetStream(b, i)
						break
					}
				}
			}
			bk, err := OpenBucket(context.Background(), js, "inbox_bench", replicas)
			if err != nil {
				b.Fatal(err)
			}
			kv := New(bk)
			start := time.Now()
			ids := seedList(b, kv, js, n)
			b.Logf("seeded %d entries in %v", n, time.Since(start).Round(time.Second))
			ctx := context.Background()
			cases := []struct {
				name string
				q    inbox.ListQuery
				want int
			}{
				{"pending", inbox.ListQuery{AgentID: "agent-a", State: inbox.StatePending, Limit: inbox.MaxList}, n / 1000},
				{"resume-turn", inbox.ListQuery{AgentID: "agent-a", AgentTurnID: "turn-4399", State: inbox.StatePending, Limit: inbox.MaxList}, 1},
				{"turn-all", inbox.ListQuery{AgentID: "agent-a", AgentTurnID: "turn-4321", State: inbox.StateAll, Limit: inbox.MaxList}, 10},
				{"all-first-page", inbox.ListQuery{AgentID: "agent-a", State: inbox.StateAll, Limit: 100}, 100},
				{"acked-first-page", inbox.ListQuery{AgentID: "agent-a", State: inbox.StateAcked, Limit: 100}, 100},
				{"acked-page-500", inbox.ListQuery{AgentID: "agent-a", State: inbox.StateAcked, Limit: 100, After: ids[n/2-1]}, 100},
			}
			// Three rounds over the cases, on the one seeded bucket: on a
			// shared machine the load moves between them.
			for round := 1; round <= 3; round++ {
				for _, tc := range cases {
					b.Run(fmt.Sprintf("%s/round-%d", tc.name, round), func(b *testing.B) {
						for range b.N {
							es, err := kv.List(ctx, "p1", tc.q)
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
		})
	}
}
