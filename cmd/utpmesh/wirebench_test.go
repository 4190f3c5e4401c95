//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/creds"
)

// BenchmarkWireRoundTrip is issue 27's bar: in one run, over the wire,
// secured, closed loop, the fair durable hop against the utpmesh round
// trip.
//
//   - hop: a client connection of this process publishes to JetStream
//     (SyncAlways) with a Reply-To header and waits for the reply; the
//     hop's server process (serveHop: an embedded nats-server configured
//     as the mesh's, a pull consumer, one fsync'd bbolt write per message)
//     answers.
//   - utp: a default `utpmesh up` child process (identities and gate on,
//     the default data directory ./utpmesh-data under a temporary working
//     directory, only the echo service) and this process's agent-demo
//     connection calling echo with the demo mandate through pkg/agent
//     (dispatch through admission, wakeup, result card, lazy ack).
//
// Both at c=1 and c=64 callers; the utp rows report their ratios to the
// hop rows of the same mode (x-hop-calls/s, x-hop-p50). Two modes:
// js=always (JetStream as the mesh configures it today, SyncAlways) and
// js=nofsync (the same processes with fsync(2) answered without reaching
// the disk by a seccomp filter, UTPMESH_BENCH_NOFSYNC: JetStream
// acknowledges without a disk flush, bbolt still fdatasyncs; an emulation
// of a lazy sync_interval, calibrated by the hop-lazy row, a hop server
// with nats-server's default sync_interval of 2 minutes). The nofsync
// rows report their ratio to the always rows (x-always-calls/s). Every
// process is up for the whole run and the rows alternate between the
// modes, so a shared machine's load drifts less between what is compared.
//
// With strace on the PATH (make bench installs it), the fsyncs rows
// start a second `up` and hop server under `strace -f --seccomp-bpf -y`
// and count the fsync(2), fdatasync(2) and sync_file_range(2) calls
// they make per call, by file: cards.db, inbox.db, other bbolt files,
// JetStream's store, hop.db. UTPMESH_REQUIRE_STRACE=1 makes a missing
// strace fail the benchmark instead of skipping those rows.
//
// Run it with a fixed op count, e.g. -benchtime 2000x (make bench does).
func BenchmarkWireRoundTrip(b *testing.B) {
	if testing.Short() {
		b.Skip("starts real processes")
	}
	nofsync := []string{envBenchNoFsync + "=1"}
	ups := map[string]*wireUp{"always": startWireUp(b, nil, false), "nofsync": startWireUp(b, nofsync, false)}
	hops := map[string]*wireHop{"always": startWireHop(b, nil, "always", false), "nofsync": startWireHop(b, nofsync, "always", false),
		"lazy": startWireHop(b, nil, "lazy", false)}
	// The rows alternate between the modes, all processes up at once, so
	// the load of a shared machine drifts less between what is compared.
	for _, c := range []int{1, 64} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			results := map[string]wireStats{}
			for _, mode := range []string{"always", "nofsync"} {
				b.Run("js="+mode, func(b *testing.B) {
					b.Run("hop", func(b *testing.B) {
						h := wireMeasure(b, c, hops[mode].call)
						results[mode+"/hop"] = h
						if mode == "nofsync" {
							b.ReportMetric(h.rate/results["always/hop"].rate, "x-always-calls/s")
						}
					})
					if mode == "nofsync" {
						b.Run("hop-lazy", func(b *testing.B) {
							s := wireMeasure(b, c, hops["lazy"].call)
							b.ReportMetric(s.rate/results["nofsync/hop"].rate, "x-nofsync-hop-calls/s")
						})
					}
					b.Run("utp", func(b *testing.B) {
						s := wireMeasure(b, c, ups[mode].call)
						results[mode+"/utp"] = s
						h := results[mode+"/hop"]
						b.ReportMetric(s.rate/h.rate, "x-hop-calls/s")
						b.ReportMetric(float64(s.p50)/float64(h.p50), "x-hop-p50")
						if mode == "nofsync" {
							b.ReportMetric(s.rate/results["always/utp"].rate, "x-always-calls/s")
						}
						if b.N == 1 {
							return // the framework's probe run
						}
						fmt.Fprintf(os.Stdout, "wire js=%s c=%d: hop %.0f calls/s p50 %v p99 %v; utp %.0f calls/s p50 %v p99 %v; utp/hop %.3f×, p50 utp/hop %.2f×\n",
							mode, c, h.rate, h.p50.Round(time.Microsecond), h.p99.Round(time.Microsecond),
							s.rate, s.p50.Round(time.Microsecond), s.p99.Round(time.Microsecond), s.rate/h.rate, float64(s.p50)/float64(h.p50))
					})
				})
			}
		})
	}
	// The bars again, as the median of short alternating rounds.
	for _, c := range []int{1, 64} {
		b.Run(fmt.Sprintf("pairs/c=%d", c), func(b *testing.B) {
			wirePairs(b, c, wireSide{hops["always"].wireProc, hops["always"].call}, wireSide{ups["always"].wireProc, ups["always"].call})
		})
	}
	for _, u := range ups {
		u.stop(b)
	}
	for _, h := range hops {
		h.stop(b)
	}

	if _, err := exec.LookPath("strace"); err != nil {
		if os.Getenv("UTPMESH_REQUIRE_STRACE") == "1" {
			b.Fatalf("fsyncs per call need strace: %v (apt-get install strace, or make bench)", err)
		}
		b.Logf("fsyncs per call not counted: no strace on the PATH (apt-get install strace, or make bench)")
		return
	}
	b.Run("fsyncs", func(b *testing.B) {
		for _, mode := range []string{"always", "nofsync"} {
			b.Run("js="+mode, func(b *testing.B) {
				var env []string
				if mode == "nofsync" {
					env = nofsync
				}
				up, hop := startWireUp(b, env, true), startWireHop(b, env, "always", true)
				for _, c := range []int{1, 64} {
					b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
						b.Run("hop", func(b *testing.B) { wireCount(b, c, hop.wireProc, hop.call) })
						b.Run("utp", func(b *testing.B) { wireCount(b, c, up.wireProc, up.call) })
					})
				}
				up.stop(b)
				hop.stop(b)
			})
		}
	})
}

// wireCount runs b.N calls at concurrency c and reports the fsyncs the
// traced process made meanwhile, per call, by store.
func wireCount(b *testing.B, c int, p *wireProc, op func(context.Context) error) {
	// Let the writes of earlier rows and warm-up settle (the inbox's lazy
	// marks commit alone after 100 ms), then count from here.
	time.Sleep(500 * time.Millisecond)
	before := p.fsyncs(b)
	wireMeasure(b, c, op)
	time.Sleep(500 * time.Millisecond) // this row's lazy marks and acks
	after := p.fsyncs(b)
	total := 0.0
	keys := make([]string, 0, len(after))
	for k := range after {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		n := float64(after[k]-before[k]) / float64(b.N)
		if n == 0 {
			continue // a store the calls did not sync
		}
		total += n
		b.ReportMetric(n, "fsyncs-"+k+"/call")
		parts = append(parts, fmt.Sprintf("%s %.2f", k, n))
	}
	b.ReportMetric(total, "fsyncs/call")
	var js, bolt float64
	for _, k := range keys {
		n := float64(after[k]-before[k]) / float64(b.N)
		switch {
		case strings.HasPrefix(k, "js:"):
			js += n
		case strings.HasSuffix(k, ".db"):
			bolt += n
		}
	}
	b.ReportMetric(js, "fsyncs-jetstream/call")
	b.ReportMetric(bolt, "fsyncs-bbolt/call")
	if b.N == 1 {
		return // the framework's probe run
	}
	fmt.Fprintf(os.Stdout, "fsyncs per call, %s: %.2f: bbolt %.2f, JetStream %.2f (%s)\n", b.Name(), total, bolt, js, strings.Join(parts, ", "))
}

// wireRun makes n calls with op from c goroutines, closed loop, and
// returns their rate and latencies.
func wireRun(c, n int, op func(context.Context) error) (wireStats, error) {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	ctx := context.Background()
	start := time.Now()
	for range c {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t0 := time.Now()
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				err := op(cctx)
				cancel()
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		return wireStats{}, err
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return wireStats{rate: float64(n) / elapsed.Seconds(), p50: lat[len(lat)/2], p99: lat[len(lat)*99/100]}, nil
}

// wirePairRounds is how many hop-then-utp rounds the pairs rows run.
const wirePairRounds = 5

// wireSide is one side of a pairs row: its server process and its call.
type wireSide struct {
	proc *wireProc
	call func(context.Context) error
}

// run makes n calls at concurrency c and returns their stats and the CPU
// time the side's server process spent per call meanwhile (0 when
// /proc cannot tell).
func (w wireSide) run(c, n int) (wireStats, float64, error) {
	before := w.proc.cpu()
	s, err := wireRun(c, n, w.call)
	return s, float64(w.proc.cpu()-before) / float64(time.Microsecond) / float64(n), err
}

// wirePairs runs the bars' comparison as wirePairRounds short rounds of
// b.N/wirePairRounds calls each, the hop then utp, on the js=always
// processes, and reports the median of the rounds' ratios: a machine
// whose speed drifts during a run (a shared disk, a noisy neighbour)
// moves both sides of a round alike, where one long row per side can
// land on different moments. It also reports the CPU time (user and
// system) each side's server process spent per call, the medians of the
// rounds: on the two-core reference machine the round trip at c=64 is
// bound by the CPU of the up process, and this steadier figure shows a
// CPU cut that the rates' noise hides.
func wirePairs(b *testing.B, c int, hop, up wireSide) {
	per := max(b.N/wirePairRounds, 1)
	var rates, p50s, hopCPU, upCPU []float64
	b.ResetTimer()
	for range wirePairRounds {
		h, hc, err := hop.run(c, per)
		if err != nil {
			b.Fatal(err)
		}
		u, uc, err := up.run(c, per)
		if err != nil {
			b.Fatal(err)
		}
		rates = append(rates, u.rate/h.rate)
		p50s = append(p50s, float64(u.p50)/float64(h.p50))
		hopCPU, upCPU = append(hopCPU, hc), append(upCPU, uc)
	}
	b.StopTimer()
	for _, s := range [][]float64{rates, p50s, hopCPU, upCPU} {
		slices.Sort(s)
	}
	mid := wirePairRounds / 2
	b.ReportMetric(rates[mid], "x-hop-calls/s")
	b.ReportMetric(p50s[mid], "x-hop-p50")
	b.ReportMetric(upCPU[mid], "utp-cpu-µs/call")
	b.ReportMetric(hopCPU[mid], "hop-cpu-µs/call")
	if b.N == 1 {
		return // the framework's probe run
	}
	fmt.Fprintf(os.Stdout, "wire pairs js=always c=%d, %d rounds of %d calls: utp/hop %.3f× (rounds %.2f–%.2f), p50 utp/hop %.2f× (rounds %.2f–%.2f); server CPU per call utp %.0f µs, hop %.0f µs\n",
		c, wirePairRounds, per, rates[mid], rates[0], rates[len(rates)-1], p50s[mid], p50s[0], p50s[len(p50s)-1], upCPU[mid], hopCPU[mid])
}

// wireStats is one row's result.
type wireStats struct {
	rate     float64
	p50, p99 time.Duration
}

// wireMeasure runs b.N operations on c goroutines (a closed loop: each
// starts its next call when the last one ends) and reports calls/s, p50
// and p99.
func wireMeasure(b *testing.B, c int, op func(context.Context) error) wireStats {
	b.Helper()
	b.ResetTimer()
	s, err := wireRun(c, b.N, op)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(s.rate, "calls/s")
	b.ReportMetric(float64(s.p50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(s.p99.Microseconds()), "p99-µs")
	return s
}

// wireProc is a child process of the benchmark, perhaps under strace.
type wireProc struct {
	cmd   *exec.Cmd
	trace string // strace's output file; "" when not traced
	seen  chan string
	mu    sync.Mutex
	lines []string
}

// startWireProc starts this test binary with args and env in dir, under
// strace when traced, and waits for a stderr line containing ready.
func startWireProc(b *testing.B, dir string, env []string, traced bool, ready string, args ...string) *wireProc {
	b.Helper()
	p := &wireProc{seen: make(chan string, 1024)}
	bin := os.Args[0]
	if !filepath.IsAbs(bin) {
		abs, err := filepath.Abs(bin)
		if err != nil {
			b.Fatal(err)
		}
		bin = abs
	}
	if traced {
		p.trace = filepath.Join(b.TempDir(), "strace.out")
		args = append([]string{"-f", "--seccomp-bpf", "-qq", "-y", "-e", "trace=fsync,fdatasync,sync_file_range", "-o", p.trace, "--", bin}, args...)
		p.cmd = exec.Command("strace", args...)
	} else {
		p.cmd = exec.Command(bin, args...)
	}
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout = io.Discard
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			select {
			case p.seen <- sc.Text():
			default:
			}
		}
	}()
	b.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			if pid := p.tracee(); pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			_ = p.cmd.Wait()
		}
	})
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case l := <-p.seen:
			if strings.Contains(l, ready) {
				return p
			}
		case <-deadline:
			p.mu.Lock()
			defer p.mu.Unlock()
			b.Fatalf("%v: no line containing %q in 2 min; output:\n%s", args, ready, strings.Join(p.lines, "\n"))
		}
	}
}

// cpu is the user and system CPU time the process has used so far, from
// /proc/<pid>/stat (0 when it cannot be read: not Linux, or traced).
func (p *wireProc) cpu() time.Duration {
	if p.trace != "" {
		return 0
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name's closing parenthesis; utime and
	// stime are the stat file's 14th and 15th, in clock ticks.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * time.Second / clockTicks
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's
// times: 100 on every Linux architecture Go supports.
const clockTicks = 100

// tracee is the pid of the process strace started (0: not traced, or
// not found).
func (p *wireProc) tracee() int {
	if p.trace == "" {
		return 0
	}
	pid := p.cmd.Process.Pid
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

// stop ends the process with SIGTERM (a graceful shutdown) and waits.
func (p *wireProc) stop(b *testing.B) {
	b.Helper()
	target := p.cmd.Process.Pid
	if pid := p.tracee(); pid > 0 {
		target = pid
	}
	_ = syscall.Kill(target, syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-done
		b.Logf("%v: killed after a minute without exiting", p.cmd.Args)
	}
}

// fsyncs counts the traced process's fsync-family calls so far, by
// store (fsyncStore).
func (p *wireProc) fsyncs(b *testing.B) map[string]int {
	b.Helper()
	f, err := os.Open(p.trace)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !(strings.Contains(l, "fsync(") || strings.Contains(l, "fdatasync(") || strings.Contains(l, "sync_file_range(")) {
			continue // "<... fdatasync resumed>" continues a counted line
		}
		path := ""
		if a, z := strings.Index(l, "<"), strings.Index(l, ">"); a >= 0 && z > a {
			path = l[a+1 : z]
		}
		out[fsyncStore(path)]++
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return out
}

// fsyncStore names the store a synced file belongs to: "js:<stream>" for
// a JetStream stream's messages, "js:<stream>/obs" for its consumers'
// state, "js:meta" for JetStream's other files, the base name of a bbolt
// file (cards.db, inbox.db, hop.db…), or "other".
func fsyncStore(path string) string {
	const js, st = "/jetstream/", "/streams/"
	switch i := strings.Index(path, js); {
	case i >= 0:
		rest := path[i+len(js):]
		j := strings.Index(rest, st)
		if j < 0 {
			return "js:meta"
		}
		name, tail, _ := strings.Cut(rest[j+len(st):], "/")
		if strings.HasPrefix(tail, "obs/") {
			return "js:" + name + "/obs"
		}
		return "js:" + name
	case strings.HasSuffix(path, ".db"):
		return filepath.Base(path)
	}
	return "other"
}

// wireUp is a running `utpmesh up` and an agent connected to it over TCP.
type wireUp struct {
	*wireProc
	nc   *nats.Conn
	ac   *agent.Client
	turn atomic.Int64
}

// startWireUp starts `utpmesh up` with its defaults (identities, the gate,
// metrics and the web UI on; data in ./utpmesh-data of a new temporary
// working directory), serving echo only, and connects the agent-demo
// identity with the demo mandate.
func startWireUp(b *testing.B, env []string, traced bool) *wireUp {
	b.Helper()
	dir := b.TempDir()
	addr := wireFreeAddr(b)
	p := startWireProc(b, dir, append(env, "UTPMESH_TEST_EXEC=1"), traced, "worker serving",
		"up", "--nats-listen", addr, "--metrics-addr", "127.0.0.1:0", "--ui-listen", "127.0.0.1:0", "--services", "echo")
	data := filepath.Join(dir, "utpmesh-data")
	var mand []byte
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if mand, err = os.ReadFile(filepath.Join(data, authz.DemoMandateFile)); err == nil && len(mand) > 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("up wrote no %s in a minute: %v", authz.DemoMandateFile, err)
		}
	}
	opt, err := creds.Option(creds.SeedPath(filepath.Join(data, "creds"), creds.AgentName("demo")))
	if err != nil {
		b.Fatal(err)
	}
	nc, err := nats.Connect("nats://"+addr, opt)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	ac, err := agent.New(nc, agent.Config{Project: "demo", Channel: "main", AgentID: authz.DemoAgent, Mandate: strings.TrimSpace(string(mand))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ac.Close() })
	u := &wireUp{wireProc: p, nc: nc, ac: ac}
	for range 20 { // warm up: registry caches, consumers, the first turns
		if err := u.call(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	return u
}

// call is one echo call, to success.
func (u *wireUp) call(ctx context.Context) error {
	i := u.turn.Add(1)
	r, err := u.ac.Call(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: fmt.Sprintf("turn-%d", i%50), Arguments: json.RawMessage(`{"i":1}`)})
	if err == nil && r.Result.Status != card.StatusSuccess {
		err = fmt.Errorf("echo ended %s: %+v", r.Result.Status, r.Result.Error)
	}
	return err
}

// stop closes the agent and stops up.
func (u *wireUp) stop(b *testing.B) {
	_ = u.ac.Close()
	u.nc.Close()
	u.wireProc.stop(b)
}

// wireHop is a running hop server and a client connection to it.
type wireHop struct {
	*wireProc
	nc *nats.Conn
	js jetstream.JetStream
}

// startWireHop starts the hop's server process (sync "always" or
// "lazy") and connects to it over TCP.
func startWireHop(b *testing.B, env []string, sync string, traced bool) *wireHop {
	b.Helper()
	dir := b.TempDir()
	addr := wireFreeAddr(b)
	p := startWireProc(b, dir, append(env, envBenchHop+"="+dir, envBenchHopAddr+"="+addr, envBenchHopSync+"="+sync), traced, hopReadyLine,
		"-test.run", "^$")
	nc, err := nats.Connect("nats://" + addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	h := &wireHop{wireProc: p, nc: nc, js: js}
	for range 20 {
		if err := h.call(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	return h
}

// call is one hop: publish with a Reply-To header, wait for the reply.
func (h *wireHop) call(ctx context.Context) error {
	inbox := nats.NewInbox()
	sub, err := h.nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	m := nats.NewMsg(hopSubject)
	m.Header.Set("Reply-To", inbox)
	m.Data = []byte(`{"i":1}`)
	if _, err := h.js.PublishMsg(ctx, m); err != nil {
		return err
	}
	_, err = sub.NextMsgWithContext(ctx)
	return err
}

func (h *wireHop) stop(b *testing.B) {
	h.nc.Close()
	h.wireProc.stop(b)
}

// wireFreeAddr is a loopback address with a port free right now.
func wireFreeAddr(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestFsyncStore: BenchmarkWireRoundTrip's fsync counts name the store of
// every path strace prints.
func TestFsyncStore(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/tmp/b/utpmesh-data/jetstream/$G/streams/cg_cmd_v1r3/msgs/1.blk", "js:cg_cmd_v1r3"},
		{"/tmp/b/utpmesh-data/jetstream/UTPMESH/streams/cg_wake_v1r3/msgs/3.blk", "js:cg_wake_v1r3"},
		{"/tmp/b/utpmesh-data/jetstream/$G/streams/cg_cmd_v1r3/obs/utp_tool_echo/o.dat", "js:cg_cmd_v1r3/obs"},
		{"/tmp/b/utpmesh-data/jetstream/$G/streams/KV_atp_state/meta.inf", "js:KV_atp_state"},
		{"/tmp/b/utpmesh-data/jetstream/$SYS/_js_/_meta_/snapshot", "js:meta"},
		{"/tmp/b/utpmesh-data/cards.db", "cards.db"},
		{"/tmp/b/hop.db", "hop.db"},
		{"/tmp/b/utpmesh-data/creds/agent-demo.nk", "other"},
		{"", "other"},
	} {
		if got := fsyncStore(tc.path); got != tc.want {
			t.Errorf("fsyncStore(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}
