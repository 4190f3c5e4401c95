package kvinbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/jskv/jskvtest"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/inboxtest"
)

// openOn makes a fresh bucket on js and ends the test with the backend
// closed and the bucket checked (KV.Check).
func openOn(t *testing.T, js jetstream.JetStream, replicas int) *KV {
	t.Helper()
	bk, err := OpenBucket(context.Background(), js, fmt.Sprintf("inbox_%d", time.Now().UnixNano()), replicas)
	must(t, err)
	b := New(bk)
	t.Cleanup(func() {
		must(t, b.Close())
		if err := b.Check(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return b
}

func openR1(t *testing.T) *KV {
	srv := meshtest.NATS(t)
	js, err := jetstream.New(meshtest.Conn(t, srv))
	must(t, err)
	return openOn(t, js, 1)
}

// TestConformance runs the inbox backend suite on a bucket on one server.
func TestConformance(t *testing.T) {
	inboxtest.Run(t, func(t *testing.T) inbox.Backend { return openR1(t) })
}

// TestConformanceR3 runs the suite on a bucket replicated on three
// servers.
func TestConformanceR3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := jskvtest.Start(t)
	inboxtest.Run(t, func(t *testing.T) inbox.Backend { return openOn(t, c.JetStream(t, 0), 3) })
}

// TestInsertRepairsAHalfInsert: an inbox that stopped after creating a
// call's dedupe key (before the entry) leaves the key naming an entry that
// does not exist; the report's redelivery finishes the insert with that id.
func TestInsertRepairsAHalfInsert(t *testing.T) {
	b := openR1(t)
	ctx := context.Background()
	r := inboxtest.Report("turn-1", "call-1", 0)
	id := card.NewID()
	_, err := b.kv.Create(ctx, "c.p1."+hashToken("p1", r.AgentTurnID, r.ToolCallID), []byte(id))
	must(t, err)
	e, created, err := b.Insert(ctx, "p1", "c1", r, "")
	must(t, err)
	if e.InboxID != id || !created {
		t.Fatalf("insert after a half insert = %s, created %v; want the id the first one chose (%s), created", e.InboxID, created, id)
	}
	es, err := b.List(ctx, "p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StatePending, Limit: inbox.MaxList})
	must(t, err)
	if len(es) != 1 || es[0].InboxID != id {
		t.Fatalf("pending = %v", inboxtest.IDs(es))
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
