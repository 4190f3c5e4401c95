package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
)

// atpLoad runs ATP calls at concurrency 8 against one booking: each
// goroutine records a safety check (a write: one event in the booking's
// log) and then reads the booking's log summary, which must count at
// least up to the event it just wrote, whichever worker answers. It
// returns the safety_check_ids of the acknowledged writes.
type atpLoad struct {
	t       *testing.T
	ac      *agent.Client
	booking string
	mu      sync.Mutex
	acked   map[string]string // safety_check_id → event_log_entry_id
	stop    chan struct{}
	wg      sync.WaitGroup
	errs    chan error
	// tolerant: a call that errs or fails (a node going down) is logged
	// and tried again instead of failing the test; a wrong answer still
	// fails it.
	tolerant bool
	failed   int
	failures []string // the first few, for the log
}

func (l *atpLoad) start(prefix string) {
	l.stop = make(chan struct{})
	for g := range 8 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				err := l.round(fmt.Sprintf("%s-%d-%d", prefix, g, i))
				var miss *missedWrite
				if err != nil && l.tolerant && !errors.As(err, &miss) {
					l.mu.Lock()
					l.failed++
					if len(l.failures) < 5 {
						l.failures = append(l.failures, err.Error())
					}
					l.mu.Unlock()
					time.Sleep(100 * time.Millisecond)
					continue
				}
				if err != nil {
					l.errs <- err
					return
				}
			}
		}()
	}
}

func (l *atpLoad) call(turn, tool string, args any) (json.RawMessage, error) {
	raw, _ := json.Marshal(args)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := l.ac.Call(ctx, agent.CallRequest{ToolName: tool, AgentTurnID: turn, Arguments: raw})
	if err != nil {
		return nil, fmt.Errorf("%s in %s: %w", tool, turn, err)
	}
	if out.Result.Status != card.StatusSuccess {
		return nil, fmt.Errorf("%s in %s: %s %+v", tool, turn, out.Result.Status, out.Result.Error)
	}
	return out.Result.Result, nil
}

func (l *atpLoad) round(turn string) error {
	raw, err := l.call(turn, "atp_record_safety_check", map[string]any{"booking_object_id": l.booking, "check_type": "SKILL_ASSESSMENT",
		"subject": "p-ben", "outcome": "PASS", "checked_by": turn})
	if err != nil {
		return err
	}
	var w struct {
		ID    string `json:"safety_check_id"`
		Event string `json:"event_log_entry_id"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return err
	}
	var seq int
	if _, err := fmt.Sscanf(strings.TrimPrefix(w.Event, l.booking+"/"), "%d", &seq); err != nil {
		return fmt.Errorf("event id %q: %w", w.Event, err)
	}
	l.mu.Lock()
	l.acked[w.ID] = w.Event
	l.mu.Unlock()
	raw, err = l.call(turn, "atp_get_context_package", map[string]any{"booking_object_id": l.booking, "fields": []string{"event_log_summary"}})
	if err != nil {
		return err
	}
	var r struct {
		Summary struct {
			Count int `json:"count"`
		} `json:"event_log_summary"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	if r.Summary.Count < seq {
		return &missedWrite{fmt.Sprintf("%s: the log read after writing event %s counts %d events: a read missed a write (%s)", turn, w.Event, r.Summary.Count, raw)}
	}
	return nil
}

// missedWrite is a read that did not see an acknowledged write.
type missedWrite struct{ msg string }

func (e *missedWrite) Error() string { return e.msg }

// checkLogged fails the test unless every acknowledged write is in the
// booking's log, read from the state engine on nc.
func (l *atpLoad) checkLogged(nc *nats.Conn) {
	l.t.Helper()
	var evs []booking.Event
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		kv, err := kvstate.Open(context.Background(), nc, kvstate.Config{Bucket: atp.StateBucket})
		if err == nil {
			evs, err = booking.New(kv, booking.Options{}).Events(context.Background(), authz.DemoProject, l.booking, 0, 0, true)
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("read the booking's log: %v", err)
		}
	}
	logged := map[string]bool{}
	for _, e := range evs {
		var d struct {
			ID string `json:"safety_check_id"`
		}
		if e.Type == booking.EventSafetyCheck && json.Unmarshal(e.Data, &d) == nil {
			logged[d.ID] = true
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, ev := range l.acked {
		if !logged[id] {
			l.t.Errorf("acknowledged safety check %s (event %s) is not in the booking's log", id, ev)
		}
	}
	l.t.Logf("ATP: %d acknowledged writes, %d events in the log, %d calls failed or erred and were tried again; the first: %q", len(l.acked), len(evs), l.failed, l.failures)
}

func (l *atpLoad) count() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.acked) }

// until waits for n more acknowledged writes, failing on a call's error.
func (l *atpLoad) until(n int) {
	l.t.Helper()
	target := l.count() + n
	for deadline := time.Now().Add(3 * time.Minute); l.count() < target; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-l.errs:
			l.t.Fatal(err)
		default:
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("ATP calls stalled at %d acknowledged writes (want %d)", l.count(), target)
		}
	}
}

func (l *atpLoad) finish() {
	l.t.Helper()
	close(l.stop)
	l.wg.Wait()
	select {
	case err := <-l.errs:
		l.t.Fatal(err)
	default:
	}
}

// TestATPWorkerProcessesShareBookings is issue 24's finding: a second
// `utpmesh worker atp` kept its own atp.db and answered "no booking". Two
// ATP workers started as separate processes with the stock credentials
// (worker-atp.nk) serve, beside up's own, one dataset: calls at
// concurrency 8 all succeed (no timeout) and every read sees every write;
// then one worker is SIGKILLed mid-load and no acknowledged write is lost.
func TestATPWorkerProcessesShareBookings(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	dir := t.TempDir()
	// The load is one agent's: no rate limit (the counters are shared
	// by the processes; TestATPRateLimitAcrossWorkerProcesses).
	cfg := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(cfg, []byte("atp:\n  limits:\n    calls_per_minute: -1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, banner := startUpInProcess(t, "--data", dir, "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "",
		"--services", "echo,atp", "--config", cfg)
	m := regexp.MustCompile(`(?m)^\s+NATS\s+(nats://\S+)`).FindStringSubmatch(banner)
	b := regexp.MustCompile(`demo booking (\S+)`).FindStringSubmatch(banner)
	if m == nil || b == nil {
		t.Fatalf("no NATS URL or demo booking in the banner:\n%s", banner)
	}
	url, bookingID := m[1], b[1]
	seed := func(name string) string { return creds.SeedPath(filepath.Join(dir, "creds"), name) }
	var workers []*proc
	for i := range 2 {
		w := startProc(t, "worker", "--nats", url, "--creds", seed(creds.WorkerName("atp")), "--data", filepath.Join(t.TempDir(), "atp"),
			"--metrics-addr", "", "--instance", fmt.Sprintf("atp-%d", i), "--log-level", "debug", "--config", cfg, "atp")
		w.waitLine(t, "worker serving")
		workers = append(workers, w)
	}
	admin, err := connectAs(t, url, seed("admin"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(dir, authz.DemoMandateFile))
	if err != nil {
		t.Fatal(err)
	}
	ac, err := agent.New(admin.nc, agent.Config{Project: authz.DemoProject, AgentID: authz.DemoAgent, Mandate: strings.TrimSpace(string(tok))})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	l := &atpLoad{t: t, ac: ac, booking: bookingID, acked: map[string]string{}, errs: make(chan error, 8)}

	l.start("share")
	l.until(48)
	l.finish()
	served := 0
	for _, w := range workers {
		if strings.Contains(w.output(), "atp_record_safety_check") {
			served++
		}
	}
	if served != 2 {
		t.Fatalf("%d of the 2 worker processes served a call; both must have", served)
	}

	// One worker SIGKILLed mid-load: its calls are redelivered to the
	// others, and every acknowledged write is in the log.
	l.start("kill")
	l.until(16)
	if err := workers[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = workers[0].cmd.Wait()
	l.until(32)
	l.finish()

	l.checkLogged(admin.nc)
	if mode, err := kvstate.Mode(context.Background(), admin.nc, atp.StateBucket); err != nil || mode != state.ModeJetStream {
		t.Fatalf("the bucket records mode %q (%v), want jetstream", mode, err)
	}
}

// A worker started with the local state beside an ATP whose state is in
// the shared bucket refuses to start and says what to do.
func TestATPWorkerOfTheOtherModeRefused(t *testing.T) {
	dir := t.TempDir()
	_, banner := startUpInProcess(t, "--data", dir, "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "",
		"--services", "echo,atp")
	m := regexp.MustCompile(`(?m)^\s+NATS\s+(nats://\S+)`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("no NATS URL in the banner:\n%s", banner)
	}
	var out strings.Builder
	code := runArgs(context.Background(), []string{"worker", "--nats", m[1], "--creds", creds.SeedPath(filepath.Join(dir, "creds"), creds.WorkerName("atp")),
		"--data", t.TempDir(), "--atp-state", "bolt", "atp"}, &out, &out)
	if code == 0 {
		t.Fatalf("a bolt worker beside the shared state started:\n%s", out.String())
	}
	for _, want := range []string{"JetStream bucket atp_state", "--atp-state jetstream"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("refusal %q does not say %q", out.String(), want)
		}
	}
}

// Issue 24's ATLAS finding, as an operator meets it: `up` serves
// atlas.tasks from its file, and a worker started with the stock
// credentials and --atlas-state jetstream refuses to start (it joined the
// group without a word, and TASK_LIST alternated between two lists).
func TestATLASWorkerOfTheOtherModeRefused(t *testing.T) {
	dir := t.TempDir()
	_, banner := startUpInProcess(t, "--data", dir, "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "",
		"--services", "echo,atlas.tasks")
	m := regexp.MustCompile(`(?m)^\s+NATS\s+(nats://\S+)`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("no NATS URL in the banner:\n%s", banner)
	}
	var out strings.Builder
	code := runArgs(context.Background(), []string{"worker", "--nats", m[1], "--creds", creds.SeedPath(filepath.Join(dir, "creds"), creds.WorkerName("atlas.tasks")),
		"--data", t.TempDir(), "--atlas-state", "jetstream", "atlas.tasks"}, &out, &out)
	if code == 0 {
		t.Fatalf("a jetstream worker beside the file group started:\n%s", out.String())
	}
	for _, want := range []string{"served from its local file (atlas-tasks.db)", "--atlas-state bolt", "--atlas-state jetstream"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("refusal %q does not say %q", out.String(), want)
		}
	}
}

// worker-atp, as `up` writes it, uses its state's bucket (the mode record,
// reads and a commit) and may not manage it or write another service's:
// the core made the bucket.
func TestATPWorkerStateBucketPermissions(t *testing.T) {
	dir := t.TempDir()
	_, banner := startUpInProcess(t, "--data", dir, "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "",
		"--services", "echo,atp,atlas.tasks", "--state", "jetstream")
	m := regexp.MustCompile(`(?m)^\s+NATS\s+(nats://\S+)`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("no NATS URL in the banner:\n%s", banner)
	}
	w, err := connectAs(t, m[1], creds.SeedPath(filepath.Join(dir, "creds"), creds.WorkerName("atp")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := kvstate.Open(ctx, w.nc, kvstate.Config{Bucket: atp.StateBucket})
	if err != nil {
		t.Fatalf("worker-atp opens its state: %v", err)
	}
	if err := kv.MarkShared(ctx); err != nil {
		t.Fatal(err)
	}
	if err := kv.Update(ctx, func(tx state.Tx) error { return tx.Bucket("demo", "probe").Put("k", []byte("v")) }); err != nil {
		t.Fatalf("worker-atp commits to its state: %v", err)
	}
	select {
	case err := <-w.errs:
		t.Fatalf("permission violation using its own bucket: %v", err)
	default:
	}
	for _, subj := range []string{"$JS.API.STREAM.UPDATE.KV_atp_state", "$JS.API.STREAM.DELETE.KV_atp_state",
		"$JS.API.STREAM.PURGE.KV_atp_state", "$KV.atlas_tasks._mode"} {
		if err := w.nc.Publish(subj, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		w.waitViolation(t, "publish", subj)
	}
}
