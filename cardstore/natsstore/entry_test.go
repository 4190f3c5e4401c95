package natsstore_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// everyEntry is a ResultHook that "stores an entry" for every result.
type everyEntry struct{}

func (everyEntry) ResultStored(*bolt.Tx, *card.Card, *card.Card, []byte) (func(), error) {
	return func() {}, nil
}

var _ cardstore.EntryPutter = (*natsstore.Client)(nil)

// serveHooked serves a bbolt store on a shared file with a ResultHook that
// stores every result's entry, and returns a client of it.
func serveHooked(t *testing.T) *natsstore.Client {
	t.Helper()
	srv := meshtest.NATS(t)
	path := filepath.Join(t.TempDir(), "cards.db")
	db, err := boltfile.Open(path, boltfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cm := boltfile.NewCommitter(db, boltfile.CommitConfig{})
	st, err := boltstore.OpenShared(db, cm, boltstore.WithResultHook(everyEntry{}))
	if err != nil {
		t.Fatal(err)
	}
	s, err := natsstore.NewServer(meshtest.Conn(t, srv), st, natsstore.ServerConfig{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Stop(context.Background())
		_ = st.Close()
		cm.Close()
		_ = db.Close()
	})
	c, err := natsstore.NewClient(meshtest.Conn(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPutResultInboxEntry: put_result's reply carries inbox_entry when the
// served store stored the result's entry in its commit (a worker's
// tool-scoped put_result and the core's plain one), and the client's
// PutWithEntry returns it; a store that stores no entries (a bbolt store
// without a hook, the replicated store) answers without it: false.
func TestPutResultInboxEntry(t *testing.T) {
	const tool = "weather.get"
	ctx := cardstore.WithTool(context.Background(), tool)
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) *natsstore.Client
		want   bool
	}{
		{"bbolt with a result hook", serveHooked, true},
		{"bbolt without a hook", func(t *testing.T) *natsstore.Client { return serveTools(t, modeBolt).client }, false},
		{"replicated (jsstore)", func(t *testing.T) *natsstore.Client { return serveTools(t, modeJS).client }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.client(t)
			// A worker's result, under the claim its StartCall took.
			if err := c.Put(ctx, callCard("p", "turn-1", "call-1", tool)); err != nil {
				t.Fatal(err)
			}
			st, err := c.StartCall(ctx, cardstore.StartCallRequest{ProjectID: "p", AgentTurnID: "turn-1", ToolCallID: "call-1", Holder: "w1", Lease: time.Minute})
			if err != nil || st.Claim == nil {
				t.Fatalf("start: %+v, %v", st, err)
			}
			res := resultCard("p", "turn-1", "call-1", tool)
			got, err := c.PutWithEntry(ctx, res)
			if err != nil || got != tc.want {
				t.Fatalf("worker's put_result: inbox_entry %v, %v; want %v", got, err, tc.want)
			}
			// Its repeat (a lost reply resent) stores nothing new: false.
			if got, err := c.PutWithEntry(ctx, res); err != nil || got {
				t.Fatalf("repeated put_result: inbox_entry %v, %v; want false", got, err)
			}
			// The core's plain put_result (no tool, no claim).
			plain := resultCard("p", "turn-1", "call-2", tool)
			if got, err := c.PutWithEntry(context.Background(), plain); err != nil || got != tc.want {
				t.Fatalf("plain put_result: inbox_entry %v, %v; want %v", got, err, tc.want)
			}
			// A put of no result never says so.
			if got, err := c.PutWithEntry(ctx, callCard("p", "turn-1", "call-3", tool)); err != nil || got {
				t.Fatalf("put of a tool.call card: inbox_entry %v, %v; want false", got, err)
			}
		})
	}
}
