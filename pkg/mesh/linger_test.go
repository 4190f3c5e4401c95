package mesh_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// TestDispatchLingerSharesCommits: with the dispatch linger, a quick
// call's tool.call card and its result share one commit of the node
// file: n calls one after another cost at most n + n/2 commits (some room
// for the Later writes that commit alone), and fewer than with the linger
// off, where each call commits its card and its result apart. The
// linger here is long (100 ms) so that the race detector's slowness
// cannot push a result past it.
func TestDispatchLingerSharesCommits(t *testing.T) {
	const n = 20
	commits := map[string]uint64{}
	for _, tc := range []struct {
		name   string
		linger time.Duration
	}{{"off", -1}, {"on", 100 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quiet,
				Tools: []worker.Tool{echo.Tool()}, DispatchLinger: tc.linger})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = m.Stop(context.Background()) }()
			ac, err := agent.New(m.Conn(), agent.Config{Project: "demo", AgentID: "agent-linger"})
			if err != nil {
				t.Fatal(err)
			}
			defer ac.Close()
			call := func(i int) {
				t.Helper()
				out, err := ac.Call(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: "t-linger", ToolCallID: fmt.Sprint("c-", i),
					Arguments: json.RawMessage(`{"i":1}`)})
				if err != nil || out.Result.Status != card.StatusSuccess {
					t.Fatalf("call %d: %+v, %v", i, out, err)
				}
			}
			call(-1) // warm up: the registry's cache, the consumer
			before := txID(t, m.CardsDB())
			for i := range n {
				call(i)
			}
			commits[tc.name] = txID(t, m.CardsDB()) - before
		})
	}
	off, on := commits["off"], commits["on"]
	t.Logf("%d calls: %d commits with the linger, %d without", n, on, off)
	if on > n+n/2 || on >= off {
		t.Fatalf("%d calls made %d commits with the linger, %d without; want at most %d with it, and fewer than without", n, on, off, n+n/2)
	}
}

// txID returns the id of the file's last committed write transaction.
func txID(t *testing.T, db *bolt.DB) uint64 {
	t.Helper()
	var id uint64
	if err := db.View(func(tx *bolt.Tx) error { id = uint64(tx.ID()); return nil }); err != nil {
		t.Fatal(err)
	}
	return id
}
