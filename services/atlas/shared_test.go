package atlas_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/internal/atlastest"
	"github.com/utpmesh/utpmesh/services/atlas/internal/kit"
	"github.com/utpmesh/utpmesh/services/atlas/tasks"
	"github.com/utpmesh/utpmesh/services/atlas/utility"
	"github.com/utpmesh/utpmesh/services/atlas/workflows"
)

// conn opens a connection of its own to the harness's NATS, as a separate
// worker process has.
func conn(t *testing.T, h *atlastest.Harness) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(h.Mesh.ClientURL(), nats.Name(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// runWorker starts a worker runtime serving tools on nc; it stops when the
// test ends.
func runWorker(t *testing.T, h *atlastest.Harness, nc *nats.Conn, id string, tools []worker.Tool) {
	t.Helper()
	rt, err := worker.New(nc, worker.Config{Store: h.Mesh.Cards(), Registry: h.Mesh.Registry(), Projects: []string{atlastest.Project},
		InstanceID: id, Logger: atlastest.Quiet}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Stop(ctx)
	})
}

// The problem of issue 17: a second worker of atlas.tasks kept its own
// file and TASK_LIST alternated between two lists. On the jetstream state
// two worker runtimes (own connections, own services) serve one dataset.
func TestTwoTaskWorkersShareOneDataset(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := atlastest.Start(t, ctx) // the mesh; the ATLAS workers are started below
	var mu sync.Mutex
	served := []map[string]int{{}, {}}
	for i := range 2 {
		nc := conn(t, h)
		s, err := tasks.Open(atlas.Deps{NC: nc, Store: h.Mesh.Cards(), State: atlas.StateJetStream, Context: ctx, Logger: atlastest.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		var tools []worker.Tool
		for _, tool := range s.Tools() {
			next := tool.Handler
			tool.Handler = func(ctx context.Context, call *worker.Call) (worker.Result, error) {
				mu.Lock()
				served[i][call.Command.ToolName]++
				mu.Unlock()
				return next(ctx, call)
			}
			tools = append(tools, tool)
		}
		runWorker(t, h, nc, fmt.Sprintf("tasks-%d", i), tools)
	}
	both := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range served {
			if m[tasks.ToolCreate] == 0 || m[tasks.ToolList] == 0 {
				return false
			}
		}
		return true
	}
	turn := h.Turn()
	var want []string
	// Create and list until each worker has served both; every list, from
	// either worker, is the whole list.
	for i := 0; i < 60 && !both(); i++ {
		title := fmt.Sprintf("task %02d", i)
		h.OK(turn, tasks.ToolCreate, map[string]any{"title": title})
		want = append(want, title)
		got := h.OK(turn, tasks.ToolList, map[string]any{"limit": 500})
		var titles []string
		for _, task := range got["tasks"].([]any) {
			titles = append(titles, atlastest.Str(task, "title"))
		}
		if !slices.Equal(titles, want) {
			t.Fatalf("after %d creates TASK_LIST = %v, want %v (served %v)", i+1, titles, want, served)
		}
	}
	if !both() {
		t.Fatalf("60 rounds and one worker never served a create or a list: %v", served)
	}
	t.Logf("served per worker: %v", served)
}

// With the local (bolt) state, a second worker of the group elsewhere
// refuses to start and says who holds the state and what to do.
func TestSecondLocalWorkerIsRefused(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := atlastest.Start(t, ctx)
	deps := func(dir string) atlas.Deps {
		return atlas.Deps{NC: h.Mesh.Conn(), Store: h.Mesh.Cards(), DataDir: dir, Context: ctx, Logger: atlastest.Quiet}
	}
	first, err := tasks.Open(deps(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tasks.Open(deps(t.TempDir()))
	if !errors.Is(err, kit.ErrStateHeld) {
		t.Fatalf("second worker: %v, want ErrStateHeld", err)
	}
	for _, want := range []string{fmt.Sprintf("held by pid %d on host", os.Getpid()), "atlas-tasks.db", "--atlas-state jetstream"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	// Stopping the first frees the state for another.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	next, err := tasks.Open(deps(t.TempDir()))
	if err != nil {
		t.Fatalf("after the holder stopped: %v", err)
	}
	_ = next.Close()

	// A lease left by a process that died on this host and data directory
	// does not block its restart (the restart holds the file's lock).
	dir := t.TempDir()
	abs, _ := filepath.Abs(dir)
	host, _ := os.Hostname()
	if _, err := h.Mesh.Cards().Claim(ctx, cardstore.ClaimRequest{ProjectID: kit.HolderProject, Key: kit.HolderKey(atlas.GroupTasks),
		Holder: fmt.Sprintf("pid 999999999 on host %s, data directory %s", host, abs), Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	again, err := tasks.Open(deps(dir))
	if err != nil {
		t.Fatalf("restart on the same data directory: %v", err)
	}
	_ = again.Close()

	// A bad state name is refused with the choices.
	_, err = tasks.Open(atlas.Deps{NC: h.Mesh.Conn(), Store: h.Mesh.Cards(), State: "postgres", Logger: atlastest.Quiet})
	if err == nil || !strings.Contains(err.Error(), "jetstream") || !strings.Contains(err.Error(), "bolt") {
		t.Fatalf("state postgres: %v", err)
	}
}

// Two schedulers (two atlas.workflows workers on the jetstream state, each
// with its own connection) catching up on five missed daily runs execute
// each exactly once between them.
func TestSchedulersRunEachRunOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var clockMu sync.Mutex
	now := time.Date(2024, 1, 15, 10, 30, 0, 0, time.UTC)
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	h := atlastest.Start(t, ctx, utility.Build)
	var scheds []*workflows.Scheduler
	for i := range 2 {
		nc := conn(t, h)
		s, err := workflows.OpenWith(atlas.Deps{NC: nc, Store: h.Mesh.Cards(), State: atlas.StateJetStream, Context: ctx, Logger: atlastest.Quiet},
			workflows.Config{NoScheduler: true, Scheduler: workflows.SchedulerConfig{Now: clock, Holder: fmt.Sprintf("sched-%d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		runWorker(t, h, nc, fmt.Sprintf("workflows-%d", i), s.Tools())
		scheds = append(scheds, s.Scheduler())
	}
	turn := h.Turn()
	saved := h.OK(turn, workflows.ToolSave, map[string]any{"name": "daily", "trigger": map[string]any{"type": "schedule", "cron": "0 9 * * *"},
		"actions": []map[string]any{{"type": "notify", "message": "good morning"}}})
	wfID := atlastest.Str(saved, "workflow_id")
	en := h.OK(turn, utility.ToolConfirm, map[string]any{"confirmation_id": pending(t, h.OK(turn, workflows.ToolEnable, map[string]any{"workflow_id": wfID}))})
	if atlastest.Str(en, "result", "next_run") != "2024-01-16T09:00:00Z" {
		t.Fatalf("enable = %v", en)
	}
	sub, err := h.Mesh.Conn().SubscribeSync("cg.*.demo.*.evt.user.atlas.notify")
	if err != nil {
		t.Fatal(err)
	}
	clockMu.Lock()
	now = time.Date(2024, 1, 20, 12, 0, 0, 0, time.UTC) // the 16th to the 20th are due
	clockMu.Unlock()

	ran := make([][]string, len(scheds))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, s := range scheds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var err error
			if ran[i], err = s.RunDue(ctx); err != nil {
				t.Errorf("scheduler %d: %v", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	all := append(slices.Clone(ran[0]), ran[1]...)
	slices.Sort(all)
	if len(all) != 5 || len(slices.Compact(slices.Clone(all))) != 5 {
		t.Fatalf("runs executed: scheduler 0 %v, scheduler 1 %v; want 5 distinct runs in all", ran[0], ran[1])
	}
	for _, s := range scheds {
		if again, err := s.RunDue(ctx); err != nil || len(again) != 0 {
			t.Fatalf("a second pass ran %v (%v)", again, err)
		}
	}
	// Every notification was published once: both publishers' messages
	// reached this subscription before their acknowledgements did.
	if err := h.Mesh.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := sub.Pending(); n != 5 {
		t.Fatalf("%d notifications published, want 5", n)
	}
	logs := h.OK(turn, workflows.ToolLogs, map[string]any{"workflow_id": wfID, "limit": 100})
	var stamps []string
	for _, l := range logs["logs"].([]any) {
		stamps = append(stamps, atlastest.Str(l, "timestamp")[:10]+":"+atlastest.Str(l, "status"))
	}
	want := "2024-01-20:completed|2024-01-19:completed|2024-01-18:completed|2024-01-17:completed|2024-01-16:completed"
	if strings.Join(stamps, "|") != want {
		t.Fatalf("logs = %v", stamps)
	}
	t.Logf("scheduler 0 ran %d, scheduler 1 ran %d", len(ran[0]), len(ran[1]))
}
