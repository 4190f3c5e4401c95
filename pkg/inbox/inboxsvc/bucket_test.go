package inboxsvc

import (
	"context"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/inboxtest"
	"github.com/utpmesh/utpmesh/pkg/inbox/kvinbox"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// TestServicesShareABucket: two inbox services on one key-value bucket
// (cluster mode runs one per node) take reports and answer queries as one
// inbox: a report to either is seen by both, and a duplicate sent to the
// other makes no second entry.
func TestServicesShareABucket(t *testing.T) {
	e := newEnv(t, 2)
	bk, err := kvinbox.OpenBucket(context.Background(), e.js, "", 1)
	must(t, err)
	var svcs []*Service
	var kvs []*kvinbox.KV
	for range 2 {
		kv := kvinbox.New(bk)
		s, err := New(e.nc, Config{Store: e.store, Backend: kv, Logger: e.cfg.Logger})
		must(t, err)
		kvs, svcs = append(kvs, kv), append(svcs, s)
	}
	ctx := context.Background()
	c := e.putResult("p1", "agent-a", "turn-1", "call-1", 0)
	first, created, err := svcs[0].st.Insert(ctx, "p1", "c1", mustReport(t, c), "")
	must(t, err)
	if !created {
		t.Fatal("first insert: not created")
	}
	again, created, err := svcs[1].st.Insert(ctx, "p1", "c1", mustReport(t, c), "")
	must(t, err)
	if created || again.InboxID != first.InboxID {
		t.Fatalf("the other service: created %v %s, want a duplicate of %s", created, again.InboxID, first.InboxID)
	}
	es, err := svcs[1].List(ctx, "p1", inbox.ListQuery{AgentID: "agent-a"})
	must(t, err)
	if len(es) != 1 || es[0].InboxID != first.InboxID {
		t.Fatalf("list through the other service = %v", inboxtest.IDs(es))
	}
	if _, err := svcs[1].AckLazy(ctx, "p1", first.InboxID); err != nil {
		t.Fatal(err)
	}
	got, err := svcs[0].Get(ctx, "p1", first.InboxID)
	must(t, err)
	if got.State != inbox.StateAcked {
		t.Fatalf("after a lazy ack through the other service: %s", got.State)
	}
	for i, s := range svcs {
		must(t, s.Stop(ctx))
		must(t, kvs[i].Close())
	}
}

func mustReport(t *testing.T, c *call) *utp.Report {
	t.Helper()
	r, err := utp.ParseReport(mustJSON(t, c.report()))
	must(t, err)
	return r
}
