package kvinbox

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
)

// seedList writes n entries of agent-a straight into the bucket's layout
// (asynchronous publishes: seeding through Insert would take minutes),
// ten per turn, the last pending of every hundredth turn, the others
// acked (no pending key, as Ack leaves them).
func seedList(tb testing.TB, b *KV, js jetstream.JetStream, n int) {
	tb.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, "KV_"+b.kv.Bucket())
	if err != nil {
		tb.Fatal(err)
	}
	pre := "$KV." + b.kv.Bucket() + "."
	now := time.Now().UTC()
	for i := 0; i < n; i++ {
		if i%500 == 0 {
			<-js.PublishAsyncComplete()
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
		v, _ := json.Marshal(r)
		pubs := []struct {
			key string
			val []byte
		}{
			{"c.p1." + hashToken("p1", turn, r.ToolCallID), []byte(r.InboxID)},
			{entryKey("p1", r.InboxID), v}, {agentKey(r), nil}, {turnKey(r), nil},
		}
		for _, p := range pubs {
			if _, err := js.PublishAsync(pre+p.key, p.val); err != nil {
				tb.Fatal(err)
			}
		}
		if r.State == inbox.StatePending {
			if _, err := js.PublishAsync(pre+pendingKey(r), nil); err != nil {
				tb.Fatal(err)
			}
		}
		// An ack drops the pending key without a trace (jskv.Bucket.Drop);
		// before issue 28 it left a delete marker there, which every
		// listing of the agent's pending entries passed over.
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		tb.Fatal("seeding did not complete")
	}
	if _, err := st.Info(ctx); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkList lists one agent's inbox at 10⁵ entries (one agent, ten
// entries per turn, 1% pending): its pending entries (what a resuming
// runtime and a waiting Call read), one turn's entries, and the first
// page of its acked history.
func BenchmarkList(b *testing.B) {
	srv := meshtest.NATS(b)
	js, err := jetstream.New(meshtest.Conn(b, srv))
	if err != nil {
		b.Fatal(err)
	}
	bk, err := OpenBucket(context.Background(), js, "inbox_bench", 1)
	if err != nil {
		b.Fatal(err)
	}
	kv := New(bk)
	const n = 100_000
	seedList(b, kv, js, n)
	ctx := context.Background()
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
