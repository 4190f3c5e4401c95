package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/natsinbox"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
	"github.com/utpmesh/utpmesh/subjects"
)

// meshCluster is three `utpmesh up` processes forming one mesh: each
// embeds a nats-server node of one NATS cluster, and the mesh state is
// replicated (R3) in JetStream.
type meshCluster struct {
	t                 *testing.T
	root, creds, keys string
	natsAddr, args    []string
	nodes             []*proc
	mandate           string
}

func startMeshCluster(t *testing.T) *meshCluster {
	t.Helper()
	root := t.TempDir()
	mc := &meshCluster{t: t, root: root, creds: filepath.Join(root, "creds"), keys: filepath.Join(root, "keys")}
	secret := filepath.Join(root, "route-secret")
	if err := os.WriteFile(secret, []byte("a-route-secret-for-the-test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The issuer key every node signs and verifies mandates with.
	if _, _, err := mandate.NewKeyDir(mc.keys).Ensure(context.Background(), authz.DemoProject); err != nil {
		t.Fatal(err)
	}
	var routes []string
	var routeAddr []string
	for range 3 {
		mc.natsAddr = append(mc.natsAddr, freeAddr(t))
		a := freeAddr(t)
		routeAddr = append(routeAddr, a)
		routes = append(routes, "nats-route://"+a)
	}
	// ATP's load is one agent's: no rate limit.
	cfg := filepath.Join(root, "mesh.yaml")
	if err := os.WriteFile(cfg, []byte("atp:\n  limits:\n    calls_per_minute: -1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		mc.args = append(mc.args, strings.Join([]string{"up", "--data", filepath.Join(root, fmt.Sprintf("n%d", i)),
			"--nats-listen", mc.natsAddr[i], "--metrics-addr", "", "--ui-listen", "", "--services", "echo,atlas.tasks,atp,cynode", "--config", cfg,
			"--cluster-name", "test", "--server-name", fmt.Sprintf("n%d", i), "--cluster-listen", routeAddr[i],
			"--routes", strings.Join(routes, ","), "--cluster-secret-file", secret,
			"--creds-dir", mc.creds, "--keys-dir", mc.keys}, "\x00"))
	}
	// The first node makes the shared credentials; then the others join.
	mc.nodes = make([]*proc, 3)
	t.Cleanup(func() {
		if t.Failed() {
			mc.logTails(80)
		}
	})
	mc.nodes[0] = startProc(t, mc.argv(0)...)
	waitFile(t, creds.SeedPath(mc.creds, meshauth.RoleAdmin))
	mc.nodes[1] = startProc(t, mc.argv(1)...)
	mc.nodes[2] = startProc(t, mc.argv(2)...)
	for i := range 3 {
		mc.waitUp(i)
		t.Logf("node n%d serving", i)
	}
	waitFile(t, filepath.Join(root, "n0", authz.DemoMandateFile))
	tok, err := os.ReadFile(filepath.Join(root, "n0", authz.DemoMandateFile))
	if err != nil {
		t.Fatal(err)
	}
	mc.mandate = strings.TrimSpace(string(tok))
	return mc
}

// logTails logs the last n lines of every node's output: what a failed
// test's nodes were doing.
func (mc *meshCluster) logTails(n int) {
	for i, p := range mc.nodes {
		if p == nil {
			continue
		}
		p.mu.Lock()
		lines := p.lines[max(0, len(p.lines)-n):]
		mc.t.Logf("--- node n%d, last %d lines:\n%s", i, len(lines), strings.Join(lines, "\n"))
		p.mu.Unlock()
	}
}

func (mc *meshCluster) argv(i int) []string { return strings.Split(mc.args[i], "\x00") }

func (mc *meshCluster) waitUp(i int) {
	mc.t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		select {
		case l := <-mc.nodes[i].seen:
			if strings.Contains(l, "worker serving") {
				return
			}
		case <-deadline:
			var out []string
			for j, n := range mc.nodes {
				if n == nil {
					continue
				}
				n.mu.Lock()
				out = append(out, fmt.Sprintf("--- node %d:\n%s", j, strings.Join(n.lines, "\n")))
				n.mu.Unlock()
			}
			mc.t.Fatalf("node %d not serving after 3 minutes; output:\n%s", i, strings.Join(out, "\n"))
		}
	}
}

func (mc *meshCluster) kill(i int) {
	mc.t.Helper()
	if err := mc.nodes[i].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		mc.t.Fatal(err)
	}
	_ = mc.nodes[i].cmd.Wait()
}

func (mc *meshCluster) restart(i int) {
	mc.t.Helper()
	mc.nodes[i] = startProc(mc.t, mc.argv(i)...)
	mc.waitUp(i)
}

// connect connects as admin to every node (the client fails over).
func (mc *meshCluster) connect() *nats.Conn {
	mc.t.Helper()
	opt, err := creds.Option(creds.SeedPath(mc.creds, meshauth.RoleAdmin))
	if err != nil {
		mc.t.Fatal(err)
	}
	var urls []string
	for _, a := range mc.natsAddr {
		urls = append(urls, "nats://"+a)
	}
	nc, err := nats.Connect(strings.Join(urls, ","), opt, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		mc.t.Fatal(err)
	}
	mc.t.Cleanup(nc.Close)
	return nc
}

// demoBooking returns a demo booking (every node loads the ATP fixture;
// nodes starting at once may each have made one).
func (mc *meshCluster) demoBooking(nc *nats.Conn) string {
	mc.t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		kv, err := kvstate.Open(context.Background(), nc, kvstate.Config{Bucket: atp.StateBucket})
		var bs []*booking.Booking
		if err == nil {
			bs, err = booking.New(kv, booking.Options{}).List(context.Background(), authz.DemoProject)
		}
		if err == nil && len(bs) > 0 {
			return bs[0].ID
		}
		if time.Now().After(deadline) {
			mc.t.Fatalf("no demo booking: %v", err)
		}
	}
}

// leaderOf returns the index of the node leading a stream.
func (mc *meshCluster) leaderOf(nc *nats.Conn, stream string) int {
	mc.t.Helper()
	js, _ := jetstream.New(nc)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := js.Stream(ctx, stream)
		cancel()
		if err == nil && st.CachedInfo().Cluster != nil {
			var n int
			if _, err := fmt.Sscanf(st.CachedInfo().Cluster.Leader, "n%d", &n); err == nil {
				return n
			}
		}
	}
	mc.t.Fatalf("no leader for stream %s", stream)
	return -1
}

// TestClusterNodeLoss runs calls at concurrency 32 against a 3-node mesh
// while a node is SIGKILLed and restarted — first a node that leads
// neither the command stream nor the CardStore's, then the command
// stream's leader — and checks every call whose command was acknowledged:
// exactly one tool.result card, one inbox entry, one stored wakeup. ATLAS,
// ATP and CyNodeAI calls run beside them at concurrency 8 each (their
// state is replicated too, served on every node): every read sees every
// write before it, and every acknowledged write is stored at the end
// (catLoad). Then atlas.tasks shows one dataset whichever node's worker
// answers.
func TestClusterNodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster of real processes")
	}
	mc := startMeshCluster(t)
	nc := mc.connect()
	ac, err := agent.New(nc, agent.Config{Project: "demo", Channel: "main", AgentID: authz.DemoAgent, Mandate: mc.mandate})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	ctx := context.Background()
	ver := subjects.DefaultVersion

	var (
		mu    sync.Mutex
		acked []string
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("c-%d-%d", g, i)
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				_, err := ac.Dispatch(cctx, agent.CallRequest{ToolName: "echo", AgentTurnID: "cluster-turn", ToolCallID: id,
					Arguments: json.RawMessage(`{"i":1}`)})
				cancel()
				if err != nil {
					time.Sleep(50 * time.Millisecond) // a node is down: the client fails over
					continue
				}
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	waitMore := func(n int) {
		t.Helper()
		target := count() + n
		for deadline := time.Now().Add(2 * time.Minute); count() < target; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("calls stalled at %d (want %d)", count(), target)
			}
		}
	}
	// ATLAS, ATP and CyNodeAI calls in flight through both node losses.
	loads := []*catLoad{atlasLoad(t, ac, true), atpLoad(t, ac, mc.demoBooking(nc), true), cynodeLoad(t, ac, true)}
	t.Log("catalogue loads ready")
	for _, l := range loads {
		l.start("cluster")
	}
	begin := time.Now()
	step := func(what string) { t.Logf("%6.1fs %s (%d acknowledged)", time.Since(begin).Seconds(), what, count()) }
	waitMore(40)
	step("calls flow")
	cmdLeader := mc.leaderOf(nc, streams.CommandStream(ver))
	cardsLeader := mc.leaderOf(nc, "utpmesh_cards")
	follower := 0
	for follower == cmdLeader || follower == cardsLeader {
		follower++
	}
	step(fmt.Sprintf("killing follower n%d (cg_cmd leader n%d, cards leader n%d)", follower, cmdLeader, cardsLeader))
	mc.kill(follower)
	waitMore(40)
	step("calls flow without the follower")
	mc.restart(follower)
	step("follower back")
	waitMore(40)
	step("calls flow")
	leader := mc.leaderOf(nc, streams.CommandStream(ver))
	step(fmt.Sprintf("killing the command stream's leader n%d", leader))
	mc.kill(leader)
	waitMore(40)
	step("calls flow without the leader")
	mc.restart(leader)
	step("leader back")
	waitMore(40)
	step("calls flow")
	for _, l := range loads {
		l.until(8) // each catalogue still answers after both losses
		step(l.name + " answers")
	}
	close(stop)
	wg.Wait()
	for _, l := range loads {
		l.finish()
		l.checkStored(nc)
	}
	mu.Lock()
	calls := append([]string(nil), acked...)
	mu.Unlock()
	t.Logf("%d commands acknowledged", len(calls))

	// Every acknowledged call: one entry, one result card, one wakeup.
	ic, err := natsinbox.NewClient(nc, svc.WithChannel("main"))
	if err != nil {
		t.Fatal(err)
	}
	var entries map[string]int
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		entries = map[string]int{}
		q := inbox.ListQuery{AgentID: authz.DemoAgent, AgentTurnID: "cluster-turn", State: inbox.StateAll}
		listed := true
		for {
			page, err := ic.List(ctx, "demo", q)
			if err != nil {
				// A node just restarted may not answer in time: ask again
				// on the next round (the loop has its own deadline).
				t.Logf("inbox list: %v (retrying)", err)
				listed = false
				break
			}
			for _, e := range page {
				entries[e.ToolCallID]++
			}
			if len(page) < inbox.MaxList {
				break
			}
			q.After = page[len(page)-1].InboxID
		}
		if !listed {
			if time.Now().After(deadline) {
				t.Fatal("the inbox did not answer for 3 minutes")
			}
			continue
		}
		wakes, err := tryCountWakeups(nc, authz.DemoAgent)
		if err != nil {
			t.Logf("count wakeups: %v (retrying)", err)
			if time.Now().After(deadline) {
				t.Fatal("the wakeup stream did not answer for 3 minutes")
			}
			continue
		}
		missing := 0
		for _, id := range calls {
			if entries[id] == 0 || wakes[id] == 0 {
				missing++
			}
		}
		if missing == 0 {
			for _, id := range calls {
				if wakes[id] != 1 {
					t.Errorf("call %s woken %d times, want once", id, wakes[id])
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged calls without an entry or a wakeup after 3 minutes", missing, len(calls))
		}
	}
	cards, err := cardstore.AllTurn(ctx, ac.Store(), "demo", "cluster-turn")
	if err != nil {
		t.Fatal(err)
	}
	results := map[string]int{}
	for _, c := range cards {
		if c.Type == card.TypeToolResult {
			results[c.ToolCallID]++
		}
	}
	for _, id := range calls {
		if entries[id] != 1 || results[id] != 1 {
			t.Errorf("call %s: %d inbox entries, %d result cards; want 1 and 1", id, entries[id], results[id])
		}
	}

	// atlas.tasks runs on every node with one shared dataset (its own
	// tasks, beside the load's).
	for i := range 9 {
		raw, _ := json.Marshal(map[string]any{"title": fmt.Sprintf("task %d", i), "tags": []string{"one-dataset"}})
		out, err := ac.Call(ctx, agent.CallRequest{ToolName: "TASK_CREATE", AgentTurnID: "tasks-turn", Arguments: raw})
		if err != nil || out.Result.Status != card.StatusSuccess {
			t.Fatalf("TASK_CREATE %d: %v %+v", i, err, out)
		}
	}
	for i := range 6 {
		out, err := ac.Call(ctx, agent.CallRequest{ToolName: "TASK_LIST", AgentTurnID: "tasks-turn", Arguments: json.RawMessage(`{"tags":["one-dataset"]}`)})
		if err != nil || out.Result.Status != card.StatusSuccess {
			t.Fatalf("TASK_LIST %d: %v %+v", i, err, out)
		}
		var list struct {
			Tasks []json.RawMessage `json:"tasks"`
		}
		if err := json.Unmarshal(out.Result.Result, &list); err != nil || len(list.Tasks) != 9 {
			t.Fatalf("TASK_LIST %d (worker %s) = %s, want the 9 tasks", i, out.ResultCard.AuthorID, out.Result.Result)
		}
	}
}
