package main

import (
	"cmp"
	"context"
	"encoding/base64"
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
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/cynode"
	cynodestore "github.com/utpmesh/utpmesh/services/cynode/store"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/blob/objblob"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
)

// catLoad runs one catalogue's calls at concurrency 8: each round makes
// a write, records it as acknowledged, and reads it back, which must see
// it whichever worker answers (a missedWrite otherwise). verify then
// checks that every acknowledged write is stored. One load per catalogue:
// atpLoad, cynodeLoad, atlasLoad.
type catLoad struct {
	t    *testing.T
	ac   *agent.Client
	name string
	// round makes one write (l.ack) and the read that must see it.
	round func(l *catLoad, turn string) error
	// verify returns the acknowledged writes that are not stored, and
	// how many writes are stored in all.
	verify func(l *catLoad, nc *nats.Conn) (missing []string, stored int, err error)
	mu     sync.Mutex
	acked  map[string]string // write id → what it stored
	stop   chan struct{}
	wg     sync.WaitGroup
	errs   chan error
	// tolerant: a call that errs or fails (a node going down) is logged
	// and tried again instead of failing the test; a wrong answer still
	// fails it.
	tolerant bool
	failed   int
	failures []string // the first few, for the log
}

func newLoad(t *testing.T, ac *agent.Client, name string, tolerant bool) *catLoad {
	return &catLoad{t: t, ac: ac, name: name, acked: map[string]string{}, errs: make(chan error, 8), tolerant: tolerant}
}

func (l *catLoad) ack(id, val string) {
	l.mu.Lock()
	l.acked[id] = val
	l.mu.Unlock()
}

func (l *catLoad) start(prefix string) {
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
				err := l.round(l, fmt.Sprintf("%s-%d-%d", prefix, g, i))
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

// call makes one call; a failed result is an error (a callFailure).
func (l *catLoad) call(turn, tool string, args any) (json.RawMessage, error) {
	raw, _ := json.Marshal(args)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := l.ac.Call(ctx, agent.CallRequest{ToolName: tool, AgentTurnID: turn, Arguments: raw})
	if err != nil {
		return nil, fmt.Errorf("%s in %s: %w", tool, turn, err)
	}
	if out.Result.Status != card.StatusSuccess {
		return nil, &callFailure{fmt.Sprintf("%s in %s: %s %+v", tool, turn, out.Result.Status, out.Result.Error), out.Result.Error}
	}
	return out.Result.Result, nil
}

// callFailure is a call that ended failed.
type callFailure struct {
	msg string
	err *card.Error
}

func (e *callFailure) Error() string { return e.msg }

// atpLoad records safety checks on one booking: each is one event in the
// booking's log, and the log summary read after it must count at least up
// to that event.
func atpLoad(t *testing.T, ac *agent.Client, bookingID string, tolerant bool) *catLoad {
	l := newLoad(t, ac, "ATP", tolerant)
	l.round = func(l *catLoad, turn string) error {
		raw, err := l.call(turn, "atp_record_safety_check", map[string]any{"booking_object_id": bookingID, "check_type": "SKILL_ASSESSMENT",
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
		if _, err := fmt.Sscanf(strings.TrimPrefix(w.Event, bookingID+"/"), "%d", &seq); err != nil {
			return fmt.Errorf("event id %q: %w", w.Event, err)
		}
		l.ack(w.ID, w.Event)
		raw, err = l.call(turn, "atp_get_context_package", map[string]any{"booking_object_id": bookingID, "fields": []string{"event_log_summary"}})
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
	l.verify = func(l *catLoad, nc *nats.Conn) ([]string, int, error) {
		kv, err := kvstate.Open(context.Background(), nc, kvstate.Config{Bucket: atp.StateBucket})
		if err != nil {
			return nil, 0, err
		}
		evs, err := booking.New(kv, booking.Options{}).Events(context.Background(), authz.DemoProject, bookingID, 0, 0, true)
		if err != nil {
			return nil, 0, err
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
		var missing []string
		for id, ev := range l.snapshot() {
			if !logged[id] {
				missing = append(missing, fmt.Sprintf("safety check %s (event %s)", id, ev))
			}
		}
		return missing, len(evs), nil
	}
	return l
}

// cynodeLoad stores artifacts of the demo task, one path per round, and
// reads each back: its content must be the one written.
func cynodeLoad(t *testing.T, ac *agent.Client, tolerant bool) *catLoad {
	l := newLoad(t, ac, "CyNodeAI", tolerant)
	content := func(turn string) string { return "artifact written by " + turn + "\n" }
	l.round = func(l *catLoad, turn string) error {
		path := "load/" + turn + ".txt"
		raw, err := l.call(turn, "artifact.put", map[string]any{"task_id": "demo-task", "path": path,
			"content_bytes_base64": base64.StdEncoding.EncodeToString([]byte(content(turn)))})
		if err != nil {
			return err
		}
		var put struct {
			Result struct {
				SHA256 string `json:"sha256"`
			} `json:"result"`
		}
		if err := json.Unmarshal(raw, &put); err != nil || put.Result.SHA256 == "" {
			return fmt.Errorf("artifact.put in %s: %s (%v)", turn, raw, err)
		}
		l.ack(path, content(turn))
		raw, err = l.call(turn, "artifact.get", map[string]any{"task_id": "demo-task", "path": path})
		var f *callFailure
		if errors.As(err, &f) && f.err != nil && strings.Contains(f.err.Message, "no artifact") {
			return &missedWrite{fmt.Sprintf("%s: artifact.get after artifact.put of %s: %s: a read missed a write", turn, path, f.msg)}
		}
		if err != nil {
			return err
		}
		var got struct {
			Result struct {
				Content string `json:"content_bytes_base64"`
			} `json:"result"`
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			return err
		}
		if b, _ := base64.StdEncoding.DecodeString(got.Result.Content); string(b) != content(turn) {
			return &missedWrite{fmt.Sprintf("%s: artifact.get of %s read %q after writing %q", turn, path, b, content(turn))}
		}
		return nil
	}
	l.verify = func(l *catLoad, nc *nats.Conn) ([]string, int, error) {
		ctx := context.Background()
		kv, err := kvstate.Open(ctx, nc, kvstate.Config{Bucket: cynode.StateBucket})
		if err != nil {
			return nil, 0, err
		}
		obs, err := objblob.Open(ctx, nc, objblob.Config{Bucket: cynode.BlobBucket})
		if err != nil {
			return nil, 0, err
		}
		st := cynodestore.New(kv, obs)
		var missing []string
		stored := 0
		for path, want := range l.snapshot() {
			_, got, err := st.GetArtifact(ctx, "demo-task", path)
			switch {
			case errors.Is(err, cynodestore.ErrNotFound):
				missing = append(missing, "artifact "+path)
			case err != nil:
				return nil, 0, err
			case string(got) != want:
				missing = append(missing, fmt.Sprintf("artifact %s (content %q, want %q)", path, got, want))
			default:
				stored++
			}
		}
		return missing, stored, nil
	}
	return l
}

// atlasLoad creates ATLAS tasks, one per round, and updates each right
// after: the update must find it.
func atlasLoad(t *testing.T, ac *agent.Client, tolerant bool) *catLoad {
	l := newLoad(t, ac, "ATLAS", tolerant)
	l.round = func(l *catLoad, turn string) error {
		raw, err := l.call(turn, "TASK_CREATE", map[string]any{"title": turn, "tags": []string{"load"}})
		if err != nil {
			return err
		}
		var c struct {
			ID string `json:"task_id"`
		}
		if err := json.Unmarshal(raw, &c); err != nil || c.ID == "" {
			return fmt.Errorf("TASK_CREATE in %s: %s (%v)", turn, raw, err)
		}
		l.ack(c.ID, turn)
		_, err = l.call(turn, "TASK_UPDATE", map[string]any{"task_id": c.ID, "updates": map[string]any{"description": "seen"}})
		var f *callFailure
		if errors.As(err, &f) && f.err != nil && strings.Contains(f.err.Message, "no such task") {
			return &missedWrite{fmt.Sprintf("%s: TASK_UPDATE of the task just created: %s: a read missed a write", turn, f.msg)}
		}
		return err
	}
	l.verify = func(l *catLoad, _ *nats.Conn) ([]string, int, error) {
		// Eight calls at a time: one by one, a few hundred tasks took
		// longer than the load that wrote them.
		var (
			mu       sync.Mutex
			missing  []string
			stored   int
			firstErr error
			wg       sync.WaitGroup
			slots    = make(chan struct{}, 8)
		)
		for id, turn := range l.snapshot() {
			wg.Add(1)
			slots <- struct{}{}
			go func() {
				defer func() { <-slots; wg.Done() }()
				_, err := l.call("verify-"+turn, "TASK_UPDATE", map[string]any{"task_id": id, "updates": map[string]any{"description": "verified"}})
				var f *callFailure
				mu.Lock()
				defer mu.Unlock()
				switch {
				case errors.As(err, &f) && f.err != nil && strings.Contains(f.err.Message, "no such task"):
					missing = append(missing, "task "+id)
				case err != nil:
					firstErr = cmp.Or(firstErr, err)
				default:
					stored++
				}
			}()
		}
		wg.Wait()
		if firstErr != nil {
			return nil, 0, firstErr
		}
		return missing, stored, nil
	}
	return l
}

// missedWrite is a read that did not see an acknowledged write.
type missedWrite struct{ msg string }

func (e *missedWrite) Error() string { return e.msg }

func (l *catLoad) snapshot() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]string, len(l.acked))
	for k, v := range l.acked {
		out[k] = v
	}
	return out
}

// checkStored fails the test unless every acknowledged write is stored,
// read on nc (asked again for a minute while the mesh settles).
func (l *catLoad) checkStored(nc *nats.Conn) {
	l.t.Helper()
	var missing []string
	var stored int
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		var err error
		missing, stored, err = l.verify(l, nc)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("%s: read the stored writes: %v", l.name, err)
		}
	}
	for _, m := range missing {
		l.t.Errorf("%s: acknowledged %s is not stored", l.name, m)
	}
	l.t.Logf("%s: %d acknowledged writes, %d stored, %d calls failed or erred and were tried again; the first: %q", l.name, len(l.snapshot()), stored, l.failed, l.failures)
}

func (l *catLoad) count() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.acked) }

// until waits for n more acknowledged writes, failing on a call's error.
func (l *catLoad) until(n int) {
	l.t.Helper()
	target := l.count() + n
	for deadline := time.Now().Add(3 * time.Minute); l.count() < target; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-l.errs:
			l.t.Fatal(err)
		default:
		}
		if time.Now().After(deadline) {
			l.mu.Lock()
			failed, failures := l.failed, append([]string(nil), l.failures...)
			l.mu.Unlock()
			l.t.Fatalf("%s calls stalled at %d acknowledged writes (want %d); %d calls failed or erred, the first: %q", l.name, l.count(), target, failed, failures)
		}
	}
}

func (l *catLoad) finish() {
	l.t.Helper()
	close(l.stop)
	l.wg.Wait()
	select {
	case err := <-l.errs:
		l.t.Fatal(err)
	default:
	}
}

// TestWorkerProcessesShareState is issue 24's finding: a second
// `utpmesh worker atp` kept its own atp.db and answered "no booking", a
// second `utpmesh worker cynode` its own cynode.db (artifacts split 3/3),
// and TASK_LIST alternated between two lists of ATLAS tasks.
// Per catalogue, two workers started as separate processes with the stock
// credentials (worker-<service>.nk) serve, beside up's own, one dataset:
// calls at concurrency 8 all succeed (no timeout) and every read sees
// every write; then one worker is SIGKILLed mid-load and no acknowledged
// write is lost. ATLAS's default (a group's local file) serves one worker
// per group: its row runs the replicated state, `up --state jetstream`
// and workers with --atlas-state jetstream.
func TestWorkerProcessesShareState(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	for _, tc := range []struct {
		service, bucket, tool string
		// upArgs and workerArgs select the service's shared state where
		// it is not the default.
		upArgs, workerArgs []string
		load               func(t *testing.T, ac *agent.Client, banner string) *catLoad
	}{
		{"atp", atp.StateBucket, "atp_record_safety_check", nil, nil, func(t *testing.T, ac *agent.Client, banner string) *catLoad {
			b := regexp.MustCompile(`demo booking (\S+)`).FindStringSubmatch(banner)
			if b == nil {
				t.Fatalf("no demo booking in the banner:\n%s", banner)
			}
			return atpLoad(t, ac, b[1], false)
		}},
		{"cynode", cynode.StateBucket, "artifact.put", nil, nil, func(t *testing.T, ac *agent.Client, _ string) *catLoad {
			return cynodeLoad(t, ac, false)
		}},
		{"atlas.tasks", atlas.KVBucket(atlas.GroupTasks), "TASK_CREATE", []string{"--state", "jetstream"}, []string{"--atlas-state", "jetstream"},
			func(t *testing.T, ac *agent.Client, _ string) *catLoad { return atlasLoad(t, ac, false) }},
	} {
		t.Run(tc.service, func(t *testing.T) {
			dir := t.TempDir()
			// The load is one agent's: no rate limit (the counters are
			// shared by the processes; TestATPRateLimitAcrossWorkerProcesses).
			cfg := filepath.Join(dir, "mesh.yaml")
			if err := os.WriteFile(cfg, []byte("atp:\n  limits:\n    calls_per_minute: -1\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, banner := startUpInProcess(t, append([]string{"--data", dir, "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "",
				"--services", "echo," + tc.service, "--config", cfg}, tc.upArgs...)...)
			m := regexp.MustCompile(`(?m)^\s+NATS\s+(nats://\S+)`).FindStringSubmatch(banner)
			if m == nil {
				t.Fatalf("no NATS URL in the banner:\n%s", banner)
			}
			url := m[1]
			seed := func(name string) string { return creds.SeedPath(filepath.Join(dir, "creds"), name) }
			var workers []*proc
			for i := range 2 {
				args := append([]string{"worker", "--nats", url, "--creds", seed(creds.WorkerName(tc.service)), "--data", filepath.Join(t.TempDir(), tc.service),
					"--metrics-addr", "", "--instance", fmt.Sprintf("%s-%d", tc.service, i), "--log-level", "debug", "--config", cfg}, tc.workerArgs...)
				w := startProc(t, append(args, tc.service)...)
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
			l := tc.load(t, ac, banner)

			l.start("share")
			l.until(48)
			l.finish()
			served := 0
			for _, w := range workers {
				if strings.Contains(w.output(), tc.tool) {
					served++
				}
			}
			if served != 2 {
				t.Fatalf("%d of the 2 worker processes served a call; both must have", served)
			}

			// One worker SIGKILLed mid-load: its calls are redelivered to
			// the others, and every acknowledged write is stored.
			l.start("kill")
			l.until(16)
			if err := workers[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = workers[0].cmd.Wait()
			l.until(32)
			l.finish()

			l.checkStored(admin.nc)
			if mode, err := kvstate.Mode(context.Background(), admin.nc, tc.bucket); err != nil || mode != state.ModeJetStream {
				t.Fatalf("the bucket records mode %q (%v), want jetstream", mode, err)
			}
		})
	}
}

// A worker started with the local state beside a service (ATP, CyNodeAI)
// whose state is in the shared bucket refuses to start and says what to
// do.
func TestWorkerOfTheOtherModeRefused(t *testing.T) {
	for _, tc := range []struct {
		service, flag string
		want          []string
	}{
		{"atp", "--atp-state", []string{"JetStream bucket atp_state", "--atp-state jetstream"}},
		{"cynode", "--cynode-state", []string{"JetStream bucket cynode_state and object store cynode_blobs", "--cynode-state jetstream"}},
	} {
		t.Run(tc.service, func(t *testing.T) {
			dir := t.TempDir()
			_, banner := startUpInProcess(t, "--data", dir, "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "",
				"--services", "echo,"+tc.service)
			m := regexp.MustCompile(`(?m)^\s+NATS\s+(nats://\S+)`).FindStringSubmatch(banner)
			if m == nil {
				t.Fatalf("no NATS URL in the banner:\n%s", banner)
			}
			var out strings.Builder
			code := runArgs(context.Background(), []string{"worker", "--nats", m[1], "--creds", creds.SeedPath(filepath.Join(dir, "creds"), creds.WorkerName(tc.service)),
				"--data", t.TempDir(), tc.flag, "bolt", tc.service}, &out, &out)
			if code == 0 {
				t.Fatalf("a bolt worker beside the shared state started:\n%s", out.String())
			}
			for _, want := range tc.want {
				if !strings.Contains(out.String(), want) {
					t.Errorf("refusal %q does not say %q", out.String(), want)
				}
			}
		})
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

// CyNodeAI's bucket and object store are its worker's alone: worker-cynode
// may not manage them (the core made them) nor touch another service's
// state; worker-atp and an agent may not read or write them. (Its own
// use is TestWorkersCreateNoBucketConsumer's cynode case.)
func TestCynodeStatePermissions(t *testing.T) {
	dir := t.TempDir()
	_, banner := startUpInProcess(t, "--data", dir, "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "",
		"--services", "echo,atp,cynode")
	m := regexp.MustCompile(`(?m)^\s+NATS\s+(nats://\S+)`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("no NATS URL in the banner:\n%s", banner)
	}
	kvs, obs := "KV_"+cynode.StateBucket, objblob.Stream(cynode.BlobBucket)
	for _, tc := range []struct {
		who   string
		subjs []string
	}{
		{creds.WorkerName("cynode"), []string{"$JS.API.STREAM.UPDATE." + kvs, "$JS.API.STREAM.DELETE." + kvs, "$JS.API.STREAM.PURGE." + kvs,
			"$JS.API.STREAM.UPDATE." + obs, "$JS.API.STREAM.DELETE." + obs, "$JS.API.STREAM.CREATE.OBJ_other",
			"$JS.API.STREAM.MSG.GET.KV_" + atp.StateBucket, "$KV." + atp.StateBucket + ".demo._v"}},
		{creds.WorkerName("atp"), []string{"$JS.API.STREAM.MSG.GET." + kvs, "$JS.API.STREAM.MSG.GET." + obs, "$JS.API.STREAM.PURGE." + obs,
			"$KV." + cynode.StateBucket + ".projects._v", "$O." + cynode.BlobBucket + ".C.x", "$O." + cynode.BlobBucket + ".M.eA=="}},
		{"agent-demo", []string{"$JS.API.STREAM.MSG.GET." + kvs, "$JS.API.STREAM.MSG.GET." + obs, "$JS.API.STREAM.INFO." + obs,
			"$KV." + cynode.StateBucket + ".projects._v", "$O." + cynode.BlobBucket + ".C.x"}},
	} {
		t.Run(tc.who, func(t *testing.T) {
			w, err := connectAs(t, m[1], creds.SeedPath(filepath.Join(dir, "creds"), tc.who))
			if err != nil {
				t.Fatal(err)
			}
			for _, subj := range tc.subjs {
				if err := w.nc.Publish(subj, []byte("{}")); err != nil {
					t.Fatal(err)
				}
				w.waitViolation(t, "publish", subj)
			}
		})
	}
}
