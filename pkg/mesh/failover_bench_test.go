package mesh_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
	"github.com/utpmesh/utpmesh/subjects"
)

// failoverNodeEnv carries a node's spec (JSON) to a child process of the
// test binary; its presence makes runFailoverNode run that node.
const failoverNodeEnv = "UTPMESH_FAILOVER_NODE"

// failoverReady is what a child prints once its mesh has started.
const failoverReady = "failover-node-ready"

// Load and windows of BenchmarkClusterFailover.
const (
	failoverRate   = 40               // calls started per second
	failoverWarm   = 3 * time.Second  // load before the kill
	failoverWindow = 20 * time.Second // load after the kill
	failoverCall   = time.Minute      // bound of one call
	failoverWait   = 3 * time.Minute  // bound of a node's start or catch-up
)

// failoverSpec is one node of the benchmark's cluster.
type failoverSpec struct {
	Index       int      `json:"index"`
	Name        string   `json:"name"`
	Dir         string   `json:"dir"`
	Listen      string   `json:"listen"`
	RouteListen string   `json:"route_listen"`
	Routes      []string `json:"routes"`
}

// runFailoverNode runs a whole mesh node (embedded clustered nats-server,
// replicated state, every service, an echo worker) and exits when the
// process was started as one by BenchmarkClusterFailover; otherwise it
// returns at once. The node stops when its stdin closes.
func runFailoverNode() {
	raw := os.Getenv(failoverNodeEnv)
	if raw == "" {
		return
	}
	var s failoverSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Fprintf(os.Stderr, "failover node: %s=%q: %v\n", failoverNodeEnv, raw, err)
		os.Exit(2)
	}
	ctx := context.Background()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: s.Dir, Listen: s.Listen, Logger: benchLog(s.Index),
		Tools: []worker.Tool{echo.Tool()}, Worker: worker.Config{Concurrency: 64}, Command: "failover bench node",
		ServerName: s.Name, Cluster: &embednats.Cluster{Name: "failover", Listen: s.RouteListen, Routes: s.Routes}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "failover node %s: %v\n", s.Name, err)
		os.Exit(1)
	}
	fmt.Println(failoverReady)
	if os.Getenv("UTPMESH_BENCH_DETAIL") != "" {
		// Diagnosis: SIGUSR1 prints every goroutine's stack.
		usr := make(chan os.Signal, 1)
		signal.Notify(usr, syscall.SIGUSR1)
		go func() {
			for range usr {
				if f, err := os.Create(filepath.Join(os.TempDir(), "failover-stacks-"+s.Name+".txt")); err == nil {
					_ = pprof.Lookup("goroutine").WriteTo(f, 1)
					f.Close()
				}
			}
		}()
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = m.Stop(sctx)
	os.Exit(0)
}

// BenchmarkClusterFailover measures what a node's crash costs the calls
// of a 3-node cluster: three `up`-like mesh nodes, each a child process of
// the test binary (its embedded nats-server clustered, the state R3 in
// JetStream, echo served on every node), and one agent connected to every
// node's URL starting failoverRate echo calls a second. After
// failoverWarm it SIGKILLs (a) a node that does not lead the command
// stream, restarts it and waits until it has caught up, then (b) the
// command stream's leader (found from the stream's info), which stays
// down. For each it reports, over the failoverWindow after the kill:
//
//   - <case>-stall-s: the longest time without a completed call (from
//     the kill to the first completion after it, or between two
//     completions);
//   - <case>-p99-s: the 99th percentile latency of the calls started in
//     the window;
//   - <case>-failed: calls of the window that ended with an error.
//
// The whole run is one operation: run it with -benchtime 1x (make bench
// does). UTPMESH_BENCH_LOG=1 shows the nodes' logs; UTPMESH_BENCH_DETAIL=1
// prints what the killed node led and the failed calls grouped by error
// (and makes a node write its goroutines to $TMPDIR/failover-stacks-<node>.txt
// on SIGUSR1; UTPMESH_BENCH_STACKS=1 sends it to the survivors 6 s after
// each kill).
func BenchmarkClusterFailover(b *testing.B) {
	if os.Getenv(failoverNodeEnv) != "" {
		b.Fatal("BenchmarkClusterFailover in a node process: TestMain must call runFailoverNode first")
	}
	for range b.N {
		fc := startFailoverCluster(b)
		fc.run(b)
		fc.stopAll()
	}
}

// failoverCluster is the benchmark's three node processes.
type failoverCluster struct {
	b     *testing.B
	specs []failoverSpec
	nodes []*failoverProc
}

// failoverProc is a running node process.
type failoverProc struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	done   chan struct{}
	stderr *bytes.Buffer
	mu     sync.Mutex
}

func startFailoverCluster(b *testing.B) *failoverCluster {
	b.Helper()
	dir := b.TempDir()
	addrs := make([]string, 6)
	var ls []net.Listener
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addrs[i] = l.Addr().String()
		ls = append(ls, l)
	}
	for _, l := range ls { // free the ports for the nodes
		l.Close()
	}
	var routes []string
	for _, a := range addrs[3:] {
		routes = append(routes, "nats-route://"+a)
	}
	fc := &failoverCluster{b: b, nodes: make([]*failoverProc, 3)}
	for i := range 3 {
		fc.specs = append(fc.specs, failoverSpec{Index: i, Name: fmt.Sprintf("n%d", i), Dir: filepath.Join(dir, fmt.Sprintf("n%d", i)),
			Listen: addrs[i], RouteListen: addrs[3+i], Routes: routes})
	}
	b.Cleanup(fc.stopAll)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = fc.start(i) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("node %d: %v", i, err)
		}
	}
	return fc
}

// start starts node i and waits until its mesh has started.
func (fc *failoverCluster) start(i int) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	raw, err := json.Marshal(fc.specs[i])
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), failoverNodeEnv+"="+string(raw))
	p := &failoverProc{cmd: cmd, done: make(chan struct{}), stderr: &bytes.Buffer{}}
	if os.Getenv("UTPMESH_BENCH_LOG") != "" {
		cmd.Stderr = os.Stderr
	} else {
		cmd.Stderr = &lockedWriter{mu: &p.mu, w: p.stderr}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.stdin = stdin
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == failoverReady {
				close(ready)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	select {
	case <-ready:
		fc.nodes[i] = p
		return nil
	case <-p.done:
	case <-time.After(failoverWait):
		_ = cmd.Process.Kill()
		<-p.done
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Errorf("node %s did not start: %s", fc.specs[i].Name, strings.TrimSpace(p.stderr.String()))
}

// kill SIGKILLs node i and waits until it is gone.
func (fc *failoverCluster) kill(i int) {
	p := fc.nodes[i]
	if p == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	_ = p.stdin.Close()
	fc.nodes[i] = nil
}

// stopAll stops every node, gracefully (stdin closed) with a bound.
func (fc *failoverCluster) stopAll() {
	for i, p := range fc.nodes {
		if p == nil {
			continue
		}
		_ = p.stdin.Close()
		select {
		case <-p.done:
		case <-time.After(40 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		fc.nodes[i] = nil
	}
}

// url lists the client URLs, node first.
func (fc *failoverCluster) url(first int) string {
	urls := []string{"nats://" + fc.specs[first].Listen}
	for i, s := range fc.specs {
		if i != first {
			urls = append(urls, "nats://"+s.Listen)
		}
	}
	return strings.Join(urls, ",")
}

// leader is the index of the node leading stream once it has a leader
// and every other running node is a current replica.
func (fc *failoverCluster) leader(js jetstream.JetStream, stream string, running int) int {
	fc.b.Helper()
	var last string
	for end := time.Now().Add(failoverWait); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := js.Stream(ctx, stream)
		cancel()
		if err != nil {
			last = err.Error()
			continue
		}
		ci := st.CachedInfo().Cluster
		if ci == nil || ci.Leader == "" {
			last = "no leader"
			continue
		}
		current := 0
		for _, r := range ci.Replicas {
			if r.Current && !r.Offline {
				current++
			}
		}
		if current+1 < running {
			last = fmt.Sprintf("%d current replicas besides the leader", current)
			continue
		}
		for i, s := range fc.specs {
			if s.Name == ci.Leader {
				return i
			}
		}
		last = "leader " + ci.Leader + " is not a node"
	}
	fc.b.Fatalf("stream %s: no leader with current replicas: %s", stream, last)
	return -1
}

// run measures the follower kill, then the leader kill.
func (fc *failoverCluster) run(b *testing.B) {
	ver := subjects.DefaultVersion
	cmds := streams.CommandStream(ver)
	// Find the leader from a connection to any node, then give the agent
	// a node that survives both kills when the leader stays where it is.
	probe, err := nats.Connect(fc.url(0), failoverClientOpts()...)
	if err != nil {
		b.Fatal(err)
	}
	defer probe.Close()
	js, err := jetstream.New(probe)
	if err != nil {
		b.Fatal(err)
	}
	lead := fc.leader(js, cmds, 3)
	home, follower := (lead+1)%3, (lead+2)%3
	// The steady state the follower's case measures: the command stream's
	// leader has gathered every other leader (mesh.Config.LeaderCheck), so
	// the follower leads nothing. Right after the cluster formed it may
	// still lead an asset, and its kill would measure that election.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		led := fc.leads(fc.specs[follower].Name)
		if len(led) == 0 {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "follower %s still leads %v after a minute; measuring anyway\n", fc.specs[follower].Name, led)
			break
		}
	}
	nc, err := nats.Connect(fc.url(home), append(failoverClientOpts(), nats.DontRandomize())...)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	ac, err := agent.New(nc, agent.Config{Project: "demo", Channel: "main", AgentID: "failover-bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer ac.Close()

	b.ResetTimer()
	r := fc.phase(b, ac, follower)
	r.report(b, "follower")
	b.StopTimer()
	if err := fc.start(follower); err != nil {
		b.Fatal(err)
	}
	lead = fc.leader(js, cmds, 3)
	b.StartTimer()
	r = fc.phase(b, ac, lead)
	r.report(b, "leader")
	b.StopTimer()
}

// leads lists the streams and consumers server leads.
func (fc *failoverCluster) leads(server string) []string {
	nc, err := nats.Connect(fc.url(0))
	if err != nil {
		return []string{err.Error()}
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []string
	sl := js.ListStreams(ctx)
	for si := range sl.Info() {
		if si.Cluster != nil && si.Cluster.Leader == server {
			out = append(out, si.Config.Name)
		}
		st, err := js.Stream(ctx, si.Config.Name)
		if err != nil {
			continue
		}
		cl := st.ListConsumers(ctx)
		for ci := range cl.Info() {
			if ci.Cluster != nil && ci.Cluster.Leader == server {
				out = append(out, si.Config.Name+"/"+ci.Name)
			}
		}
	}
	return out
}

// failoverClientOpts are the agent's connect options: reconnect for ever.
func failoverClientOpts() []nats.Option {
	return []nats.Option{nats.Name("failover-bench"), nats.MaxReconnects(-1)}
}

// callRec is one call of the load.
type callRec struct {
	start, end time.Time
	err        error
}

// phaseResult is what one kill cost.
type phaseResult struct {
	stall, p99 time.Duration
	failed     int
	calls      int
	firstErr   error
	errs       map[string]int
}

func (r phaseResult) report(b *testing.B, name string) {
	b.ReportMetric(r.stall.Seconds(), name+"-stall-s")
	b.ReportMetric(r.p99.Seconds(), name+"-p99-s")
	b.ReportMetric(float64(r.failed), name+"-failed")
	if r.firstErr != nil {
		b.Logf("%s: %d of %d calls failed, first: %v", name, r.failed, r.calls, r.firstErr)
	}
	if os.Getenv("UTPMESH_BENCH_DETAIL") != "" {
		for _, k := range slices.Sorted(maps.Keys(r.errs)) {
			fmt.Fprintf(os.Stderr, "%s: %d× %s\n", name, r.errs[k], k)
		}
	}
}

// errKind is an error's message without its identifiers, for counting.
var idRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f-]{27}|failover-[0-9]+-[0-9]+|_INBOX\.[A-Za-z0-9.]+`)

func errKind(err error) string { return idRE.ReplaceAllString(err.Error(), "ID") }

// phase runs the load, kills node victim after failoverWarm, keeps the
// load on for failoverWindow, waits for every call, and measures.
func (fc *failoverCluster) phase(b *testing.B, ac *agent.Client, victim int) phaseResult {
	var (
		mu   sync.Mutex
		recs []*callRec
		wg   sync.WaitGroup
	)
	tick := time.NewTicker(time.Second / failoverRate)
	defer tick.Stop()
	start := time.Now()
	var kill time.Time
	dumped := false
	for i := 0; ; i++ {
		now := <-tick.C
		if kill.IsZero() && now.Sub(start) >= failoverWarm {
			if os.Getenv("UTPMESH_BENCH_DETAIL") != "" {
				fmt.Fprintf(os.Stderr, "%s leads: %v\n", fc.specs[victim].Name, fc.leads(fc.specs[victim].Name))
			}
			var elected func()
			if os.Getenv("UTPMESH_BENCH_DETAIL") != "" {
				elected = fc.watchElections(victim)
			}
			kill = time.Now()
			fc.kill(victim)
			if elected != nil {
				go elected()
			}
		}
		if !kill.IsZero() && now.Sub(kill) >= failoverWindow {
			break
		}
		if !kill.IsZero() && !dumped && now.Sub(kill) >= 6*time.Second && os.Getenv("UTPMESH_BENCH_STACKS") != "" {
			dumped = true
			for _, p := range fc.nodes {
				if p != nil {
					_ = p.cmd.Process.Signal(syscall.SIGUSR1)
				}
			}
		}
		rec := &callRec{start: time.Now()}
		mu.Lock()
		recs = append(recs, rec)
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), failoverCall)
			defer cancel()
			_, err := ac.Call(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: fmt.Sprintf("failover-%d-%d", victim, i%20),
				Arguments: json.RawMessage(`{"i":1}`)})
			mu.Lock()
			rec.end, rec.err = time.Now(), err
			mu.Unlock()
		}()
	}
	wg.Wait()
	if os.Getenv("UTPMESH_BENCH_DETAIL") != "" {
		slow := slices.Clone(recs)
		slices.SortFunc(slow, func(a, b *callRec) int { return cmp.Compare(b.end.Sub(b.start), a.end.Sub(a.start)) })
		for _, c := range slow[:min(5, len(slow))] {
			fmt.Fprintf(os.Stderr, "slow call: started %+.2fs after the kill, took %.2fs, err %v\n", c.start.Sub(kill).Seconds(), c.end.Sub(c.start).Seconds(), c.err)
		}
	}
	return measureFault(recs, kill, kill.Add(failoverWindow))
}

// measureFault computes the longest stall after kill and the p99 of the
// calls started in [kill, end).
func measureFault(recs []*callRec, kill, end time.Time) phaseResult {
	r := phaseResult{errs: map[string]int{}}
	var ends []time.Time
	var lat []time.Duration
	for _, c := range recs {
		if c.err == nil && !c.end.Before(kill) {
			ends = append(ends, c.end)
		}
		if c.start.Before(kill) || !c.start.Before(end) {
			continue
		}
		r.calls++
		lat = append(lat, c.end.Sub(c.start))
		if c.err != nil {
			r.failed++
			if r.firstErr == nil {
				r.firstErr = c.err
			}
			r.errs[fmt.Sprintf("after %2.0fs in %2.0fs: %s", c.start.Sub(kill).Seconds(), c.end.Sub(c.start).Seconds(), errKind(c.err))]++
		}
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	prev := kill
	for _, e := range ends {
		if !e.Before(end) {
			// a completion after the window closes the last gap
			r.stall = max(r.stall, e.Sub(prev))
			break
		}
		r.stall = max(r.stall, e.Sub(prev))
		prev = e
	}
	if len(ends) == 0 {
		r.stall = end.Sub(kill)
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		r.p99 = lat[(len(lat)*99)/100]
	}
	return r
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// watchElections lists, before node victim is killed, the streams it
// leads and the consumers it leads, and returns a function to run after
// the kill that prints, for each, how long after the kill it had a new
// leader (diagnosis: a leader's loss costs the latest of these RAFT
// elections, 4–9 s each in nats-server).
func (fc *failoverCluster) watchElections(victim int) func() {
	name := fc.specs[victim].Name
	led := fc.leads(name)
	return func() {
		kill := time.Now()
		nc, err := nats.Connect(fc.url((victim+1)%3), nats.MaxReconnects(-1))
		if err != nil {
			fmt.Fprintf(os.Stderr, "elections: %v\n", err)
			return
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		out := make([]string, len(led))
		var wg sync.WaitGroup
		for i, asset := range led {
			stream, consumer, isConsumer := strings.Cut(asset, "/")
			out[i] = asset + " none"
			wg.Go(func() {
				for end := kill.Add(failoverWindow); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					var cl *jetstream.ClusterInfo
					if isConsumer {
						if c, err := js.Consumer(ctx, stream, consumer); err == nil {
							cl = c.CachedInfo().Cluster
						}
					} else if st, err := js.Stream(ctx, stream); err == nil {
						cl = st.CachedInfo().Cluster
					}
					cancel()
					if cl != nil && cl.Leader != "" && cl.Leader != name {
						out[i] = fmt.Sprintf("%s %.1fs", asset, time.Since(kill).Seconds())
						return
					}
				}
			})
		}
		wg.Wait()
		fmt.Fprintf(os.Stderr, "%s's assets had a new leader after: %s\n", name, strings.Join(out, ", "))
	}
}
