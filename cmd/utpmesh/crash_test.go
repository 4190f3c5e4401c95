package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/natsinbox"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestSIGKILLUpWithReportsInFlight kills a real `utpmesh up` (worker,
// inbox, CardStore and nats-server in one process) while calls are
// executing and being reported, starts it again on the same data
// directory, and checks every call whose command JetStream acknowledged:
// it has exactly one tool.result card, exactly one inbox entry, and
// exactly one wakeup stored for it — woken once, nothing lost, nothing
// doubled.
func TestSIGKILLUpWithReportsInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills real processes")
	}
	dir := t.TempDir()
	addr := freeAddr(t)
	args := []string{"up", "--data", dir, "--nats-listen", addr, "--metrics-addr", "", "--ui-listen", "", "--services", "echo", "--log-level", "debug"}
	up := startProc(t, args...)
	up.waitLine(t, "worker serving")
	waitFile(t, filepath.Join(dir, authz.DemoMandateFile))

	connect := func() (*nats.Conn, *agent.Client) {
		opt, err := creds.Option(creds.SeedPath(filepath.Join(dir, "creds"), meshauth.RoleAdmin))
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect("nats://"+addr, opt, nats.MaxReconnects(0))
		if err != nil {
			t.Fatal(err)
		}
		mand, err := os.ReadFile(filepath.Join(dir, "demo-mandate.jwt"))
		if err != nil {
			t.Fatal(err)
		}
		ac, err := agent.New(nc, agent.Config{Project: "demo", Channel: "main", AgentID: authz.DemoAgent, Mandate: string(mand)})
		if err != nil {
			t.Fatal(err)
		}
		return nc, ac
	}
	nc, ac := connect()

	// Dispatch from 8 goroutines until the process is gone; keep the calls
	// whose command was acknowledged.
	var (
		mu    sync.Mutex
		acked []string
		wg    sync.WaitGroup
	)
	ctx := context.Background()
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("c-%d-%d", g, i)
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := ac.Dispatch(cctx, agent.CallRequest{ToolName: "echo", AgentTurnID: "crash-turn", ToolCallID: id,
					Arguments: json.RawMessage(`{"i":1}`)})
				cancel()
				if err != nil {
					return
				}
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}
		}(g)
	}
	// Kill once reports are flowing: some entries exist, more are coming.
	ic, err := natsinbox.NewClient(nc, svc.WithChannel("main"))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		es, err := ic.List(ctx, "demo", inbox.ListQuery{AgentID: authz.DemoAgent, State: inbox.StateAll})
		if err == nil && len(es) >= 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reports flowing after 60s (%d entries, %v)", len(es), err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := up.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = up.cmd.Wait()
	wg.Wait()
	ac.Close()
	nc.Close()
	mu.Lock()
	calls := append([]string(nil), acked...)
	mu.Unlock()
	t.Logf("%d commands acknowledged before the kill", len(calls))

	up2 := startProc(t, args...)
	up2.waitLine(t, "worker serving")
	waitFile(t, filepath.Join(dir, authz.DemoMandateFile))
	nc, ac = connect()
	defer nc.Close()
	defer ac.Close()
	ic, err = natsinbox.NewClient(nc, svc.WithChannel("main"))
	if err != nil {
		t.Fatal(err)
	}

	// Every acknowledged call gets its entry.
	var entries map[string][]inbox.Entry
	deadline = time.Now().Add(120 * time.Second)
	for {
		entries = map[string][]inbox.Entry{}
		q := inbox.ListQuery{AgentID: authz.DemoAgent, State: inbox.StateAll}
		for {
			page, err := ic.List(ctx, "demo", q)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range page {
				entries[e.ToolCallID] = append(entries[e.ToolCallID], e)
			}
			if len(page) < inbox.MaxList {
				break
			}
			q.After = page[len(page)-1].InboxID
		}
		missing := 0
		for _, id := range calls {
			if len(entries[id]) == 0 {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged calls have no inbox entry 120s after the restart", missing, len(calls))
		}
		time.Sleep(50 * time.Millisecond)
	}

	// One entry and one result card per call.
	results := map[string]int{}
	turn, err := cardstore.AllTurn(ctx, ac.Store(), "demo", "crash-turn")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range turn {
		if c.Type == card.TypeToolResult {
			results[c.ToolCallID]++
		}
	}
	for _, id := range calls {
		if n := len(entries[id]); n != 1 {
			t.Errorf("call %s has %d inbox entries, want 1", id, n)
		}
		if n := results[id]; n != 1 {
			t.Errorf("call %s has %d tool.result cards, want 1", id, n)
		}
	}

	// One stored wakeup per entry. A call whose entry was committed just
	// before the kill may get its wakeup only when its command is
	// redelivered (after the consumer's ack wait) and re-reported: wait
	// for every call to have one, then count.
	var wakes map[string]int
	deadline = time.Now().Add(120 * time.Second)
	for {
		wakes = countWakeups(t, nc, authz.DemoAgent)
		missing := 0
		for _, id := range calls {
			if wakes[id] == 0 {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged calls have no stored wakeup 120s after the restart", missing, len(calls))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, id := range calls {
		if n := wakes[id]; n != 1 {
			t.Errorf("call %s was woken %d times (stored wakeups), want once", id, n)
		}
	}
}

// waitFile waits until path exists.
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not written within 30s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// countWakeups reads every wakeup of the agent stored in the wakeup stream
// and counts them by tool_call_id.
func countWakeups(t *testing.T, nc *nats.Conn, agentID string) map[string]int {
	t.Helper()
	out, err := tryCountWakeups(nc, agentID)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryCountWakeups is countWakeups returning its error (a cluster node that
// just restarted may not answer in time).
func tryCountWakeups(nc *nats.Conn, agentID string) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return meshtest.StoredWakeups(ctx, nc, subjects.DefaultVersion, "demo", agentID)
}
