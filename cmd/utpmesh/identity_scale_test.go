package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/services/atp/ratelimit"
	"github.com/utpmesh/utpmesh/services/cynode/audit"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestCatalogueWorkersWithStockCreds: two more ATP and two more CyNodeAI
// workers started as separate processes with the credentials `up` wrote
// (worker-atp.nk, worker-cynode.nk) start and answer calls without a
// permission violation: the core made ATP's rate-limit bucket, each
// identity may use exactly its own bucket and subjects (issue 24, item 7:
// the second ATP worker hit a violation on KV_utpmesh_atp_ratelimit, the
// second CyNodeAI worker one on its audit subject). Each identity's
// operations are also run directly, so the check does not depend on which
// worker JetStream hands a call to.
func TestCatalogueWorkersWithStockCreds(t *testing.T) {
	dir := t.TempDir()
	u, banner := startUpInProcess(t, "--data", dir, "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "",
		"--services", "echo,atp,cynode")
	m := regexp.MustCompile(`(?m)^\s+NATS\s+(nats://\S+)`).FindStringSubmatch(banner)
	b := regexp.MustCompile(`demo booking (\S+)`).FindStringSubmatch(banner)
	if m == nil || b == nil {
		t.Fatalf("no NATS URL or demo booking in the banner:\n%s", banner)
	}
	url, booking := m[1], b[1]
	seed := func(name string) string { return creds.SeedPath(filepath.Join(dir, "creds"), name) }

	// The identities' own operations, directly.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	atpw, err := connectAs(t, url, seed("worker-atp"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(atpw.nc)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratelimit.New(ctx, js, ratelimit.Config{})
	if err != nil {
		t.Fatalf("worker-atp opens the counters: %v", err)
	}
	if err := lim.Allow(ctx, "demo", "agent-1", ratelimit.KindCall); err != nil {
		t.Fatalf("worker-atp counts a call: %v", err)
	}
	cyw, err := connectAs(t, url, seed("worker-cynode"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := audit.NewPublisher(cyw.nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, subjects.DefaultVersion, &audit.Record{Time: time.Now().UTC(), ProjectID: "demo", ChannelID: "default", Tool: "help.get", Server: audit.Server, Status: audit.StatusSuccess}); err != nil {
		t.Fatalf("worker-cynode publishes an audit record: %v", err)
	}
	for _, a := range []*actor{atpw, cyw} {
		select {
		case err := <-a.errs:
			t.Fatalf("permission violation: %v", err)
		default:
		}
	}

	// Two more workers of each, as separate processes.
	var workers []*proc
	for i := range 2 {
		for _, s := range []string{"atp", "cynode"} {
			w := startProc(t, "worker", "--nats", url, "--creds", seed(creds.WorkerName(s)), "--data", filepath.Join(t.TempDir(), s),
				"--metrics-addr", "", "--instance", fmt.Sprintf("%s-%d", s, i), s)
			w.waitLine(t, "worker serving")
			workers = append(workers, w)
		}
	}
	// Calls at concurrency 8 each: every one finishes (no tool_timeout).
	mandate := filepath.Join(dir, "demo-mandate.jwt")
	var wg sync.WaitGroup
	outs := make(chan string, 16)
	for i := range 16 {
		args := []string{"call", "atp_booking_get", "--args", `{"booking_object_id":"` + booking + `"}`}
		if i%2 == 1 {
			args = []string{"call", "help.get", "--args", `{"task_id":"t1"}`}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out strings.Builder
			cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			runArgs(cctx, append(args, "--nats", url, "--creds", seed("admin"), "--mandate", mandate, "--json"), &out, &out)
			outs <- out.String()
		}()
	}
	wg.Wait()
	close(outs)
	for out := range outs {
		if strings.Contains(out, "tool_timeout") || strings.Contains(out, "did not finish") {
			t.Errorf("a call timed out:\n%s", out)
		}
	}
	for _, w := range workers {
		w.mu.Lock()
		for _, l := range w.lines {
			if strings.Contains(strings.ToLower(l), "violation") {
				t.Errorf("worker: %s", l)
			}
		}
		w.mu.Unlock()
	}
	if code := u.stop(); code != 0 {
		t.Fatalf("up after Ctrl-C: exit %d", code)
	}
}
