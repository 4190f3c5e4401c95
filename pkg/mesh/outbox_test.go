package mesh_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
	"github.com/utpmesh/utpmesh/subjects"
)

// lastBlock returns the path of the last message block of a stream of
// the mesh in dir.
func lastBlock(t *testing.T, dir, stream string) string {
	t.Helper()
	blks, err := filepath.Glob(filepath.Join(dir, "jetstream", "jetstream", "*", "streams", stream, "msgs", "*.blk"))
	if err != nil || len(blks) == 0 {
		t.Fatalf("no message block of %s under %s (%v)", stream, dir, err)
	}
	num := func(p string) int { n, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(p), ".blk")); return n }
	slices.SortFunc(blks, func(a, b string) int { return num(a) - num(b) })
	return blks[len(blks)-1]
}

// settledSize waits until the file's size has not changed for 200 ms (the
// stream's async flush has written what it holds) and returns it.
func settledSize(t *testing.T, path string) int64 {
	t.Helper()
	var last int64 = -1
	stable := time.Now()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != last {
			last, stable = fi.Size(), time.Now()
			continue
		}
		if time.Since(stable) >= 200*time.Millisecond {
			return last
		}
	}
	t.Fatalf("%s keeps growing", path)
	return 0
}

// cutTail truncates a stopped stream's last block to size, as a crash
// before the stream's fsync leaves it: the messages stored after that
// point are gone, the consumers' state still counts them.
func cutTail(t *testing.T, block string, size int64) {
	t.Helper()
	fi, err := os.Stat(block)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() <= size {
		t.Fatalf("%s has %d bytes, not more than the %d to keep: nothing to lose", block, fi.Size(), size)
	}
	if err := os.Truncate(block, size); err != nil {
		t.Fatal(err)
	}
	t.Logf("cut %s from %d to %d bytes", filepath.Base(block), fi.Size(), size)
}

// TestLostStreamTail (issue 27): a node's command and wakeup streams
// acknowledge before their fsync, and a crash can lose their last
// messages; the node file restores them at the next start. Commands
// admitted while no worker runs and wakeups of finished calls are cut from
// their streams' tails (the block files truncated while the node is down,
// as a crash before the fsync leaves them); after the restart every
// admitted call is executed once, has one result and one inbox entry,
// its agent is woken (a wakeup stored for it), and the outbox is empty.
func TestLostStreamTail(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	start := func(tools ...worker.Tool) *mesh.Mesh {
		t.Helper()
		m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet, Tools: tools})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	stop := func(m *mesh.Mesh) {
		t.Helper()
		if err := m.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	const turn, agentID = "t-tail", "agent-tail"
	dispatch := func(m *mesh.Mesh, from, to int) {
		t.Helper()
		ac, err := agent.New(m.Conn(), agent.Config{Project: "demo", AgentID: agentID})
		if err != nil {
			t.Fatal(err)
		}
		defer ac.Close()
		for i := from; i < to; i++ {
			if _, err := ac.Dispatch(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: turn, ToolCallID: fmt.Sprint("c-", i),
				Arguments: json.RawMessage(`{"i":1}`)}); err != nil {
				t.Fatalf("dispatch %d: %v", i, err)
			}
		}
	}
	cmdStream, wakeStream := streams.CommandStream(subjects.DefaultVersion), streams.WakeupStream(subjects.DefaultVersion)

	// Register echo once, then run without a worker: admitted commands wait.
	stop(start(echo.Tool()))
	m := start()
	js, err := jetstream.New(m.Conn())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{cmdStream, wakeStream} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if pm := st.CachedInfo().Config.PersistMode; pm != jetstream.AsyncPersistMode {
			t.Fatalf("%s persist mode = %v, want async on a single node", name, pm)
		}
	}
	dispatch(m, 0, 10)
	keep := settledSize(t, lastBlock(t, dir, cmdStream))
	dispatch(m, 10, 20) // acknowledged; their commands are lost below
	stop(m)
	cutTail(t, lastBlock(t, dir, cmdStream), keep)

	// With the worker: the ten lost commands come from the outbox.
	m = start(echo.Tool())
	waitEntries := func(m *mesh.Mesh, n int) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d inbox entries", n), func() bool {
			es, err := m.Inbox().List(ctx, "demo", inbox.ListQuery{AgentID: agentID, State: inbox.StateAll, Limit: 100})
			return err == nil && len(es) >= n
		})
	}
	waitEntries(m, 20)
	keep = settledSize(t, lastBlock(t, dir, wakeStream))
	dispatch(m, 20, 30) // executed and woken; their wakeups are lost below
	waitEntries(m, 30)
	// Their wakeups are marked sent (the mark is what the start reads).
	waitFor(t, "the wakeups of calls 20-29 marked sent", func() bool {
		es, err := m.Inbox().List(ctx, "demo", inbox.ListQuery{AgentID: agentID, State: inbox.StateAll, Limit: 100})
		if err != nil {
			return false
		}
		for _, e := range es {
			if e.WakeupSentAt == nil {
				return false
			}
		}
		return true
	})
	settledSize(t, lastBlock(t, dir, wakeStream))
	stop(m)
	cutTail(t, lastBlock(t, dir, wakeStream), keep)

	m = start(echo.Tool())
	defer stop(m)
	wakes := map[string]int{}
	waitFor(t, "a stored wakeup for each of the 30 calls", func() bool {
		var err error
		if wakes, err = storedWakeups(ctx, m, agentID); err != nil {
			return false
		}
		for i := range 30 {
			if wakes[fmt.Sprint("c-", i)] == 0 {
				return false
			}
		}
		return true
	})
	cards, err := cardstore.AllTurn(ctx, m.Cards(), "demo", turn)
	if err != nil {
		t.Fatal(err)
	}
	results := map[string]int{}
	for _, c := range cards {
		if c.Type == card.TypeToolResult {
			results[c.ToolCallID]++
		}
	}
	es, err := m.Inbox().List(ctx, "demo", inbox.ListQuery{AgentID: agentID, State: inbox.StateAll, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string]int{}
	for _, e := range es {
		entries[e.ToolCallID]++
	}
	for i := range 30 {
		id := fmt.Sprint("c-", i)
		if results[id] != 1 || entries[id] != 1 {
			t.Errorf("call %s: %d results, %d inbox entries; want one of each", id, results[id], entries[id])
		}
	}
	if n, err := m.Cards().(*boltstore.Store).OutboxLen(ctx); err != nil || n != 0 {
		t.Errorf("outbox holds %d entries (%v) after every call has its result, want none", n, err)
	}
}

// storedWakeups counts the wakeups of the agent stored in the wakeup
// stream, by tool_call_id.
func storedWakeups(ctx context.Context, m *mesh.Mesh, agentID string) (map[string]int, error) {
	return meshtest.StoredWakeups(ctx, m.Conn(), subjects.DefaultVersion, "demo", agentID)
}
