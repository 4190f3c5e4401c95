package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox/natsinbox"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/retention"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
	"github.com/utpmesh/utpmesh/subjects"
)

// countLines returns the lines of a JSON-lines file, each parsed as a card.
func countLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 2<<20)
	for sc.Scan() {
		if _, err := card.Parse(sc.Bytes()); err != nil {
			t.Fatalf("%s line %d: %v", path, n+1, err)
		}
		n++
	}
	return n
}

func TestCLITurnsRetention(t *testing.T) {
	root := t.TempDir()
	t.Chdir(root) // where 'up' keeps ./utpmesh-data: its admin creds, demo mandate and archive
	cm := startGatedMesh(t, root)

	r := cm.must(t, 0, "turns", "retention")
	wantContains(t, "no policy", r.stdout, "project demo: keep every turn")
	r = cm.must(t, 2, "turns", "gc")
	wantContains(t, "gc without a policy", r.stderr, "project demo has no retention policy", "turns retention --project demo --max-age 720h")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-age", "10s"}, "at least 1m0s"},
		{[]string{"--max-age", "30 days"}, "is not a duration"},
		{[]string{"--max-bytes", "lots"}, "is not a size"},
		{[]string{"--off", "--max-age", "1h"}, "--off removes the policy"},
	} {
		r := cm.must(t, 2, append([]string{"turns", "retention"}, tc.args...)...)
		wantContains(t, strings.Join(tc.args, " "), r.stderr, tc.want)
	}
	r = cm.must(t, 0, "turns", "retention", "--max-age", "720h", "--max-bytes", "1GiB")
	wantContains(t, "set", r.stdout, "project demo: max age 720h0m0s, max 1073741824 bytes")
	got := decodeJSON[struct {
		Retention retention.Policy `json:"retention"`
	}](t, cm.must(t, 0, "turns", "retention", "--max-bytes", "0", "--json").stdout)
	if got.Retention.MaxAge.Hours() != 720 || got.Retention.MaxBytes != 0 {
		t.Fatalf("retention after --max-bytes 0: %+v, want the age kept and no size limit", got.Retention)
	}
	// The policy and the mandate setting ride in one config: setting one
	// keeps the other.
	r = cm.must(t, 0, "policy", "config", "--project", "demo", "--mandate", "required")
	wantContains(t, "config", r.stdout, "mandate required")
	r = cm.must(t, 0, "turns", "retention")
	wantContains(t, "after policy config", r.stdout, "project demo: max age 720h0m0s")

	for _, turn := range []string{"r-1", "r-2", "r-3"} {
		cm.must(t, 0, "call", "echo", "--turn", turn, "--args", `{"turn":"`+turn+`"}`)
	}
	cm.must(t, 0, "turns", "export", "all.jsonl")
	if n := countLines(t, "all.jsonl"); n != 6 {
		t.Fatalf("export of 3 turns wrote %d cards, want 6", n)
	}
	r = cm.must(t, 0, "turns", "export", "--turn", "r-2", "-")
	if n := strings.Count(r.stdout, "\n"); n != 2 || !strings.Contains(r.stdout, `"tool.call"`) {
		t.Fatalf("export of r-2 to stdout: %q", r.stdout)
	}
	cm.must(t, 0, "turns", "export", "--before", "2000-01-01T00:00:00Z", "none.jsonl")
	if n := countLines(t, "none.jsonl"); n != 0 {
		t.Fatalf("export --before 2000: %d cards", n)
	}
	r = cm.must(t, 2, "turns", "export", "--before", "yesterday", "x.jsonl")
	wantContains(t, "bad --before", r.stderr, "neither a time")

	// Nothing is a month old: the stored policy removes nothing.
	r = cm.must(t, 0, "turns", "gc", "--dry-run")
	wantContains(t, "dry run", r.stdout, "dry run: project demo, max age 720h0m0s: 0 of 3 turns past the limits")
	// A size limit of one byte puts every turn past it.
	r = cm.must(t, 0, "turns", "gc", "--max-bytes", "1", "--dry-run")
	wantContains(t, "dry run", r.stdout, "3 of 3 turns past the limits; 3 would be deleted", "would delete: r-1 r-2 r-3")
	cm.must(t, 0, "turns", "show", "r-1") // still there
	r = cm.must(t, 0, "turns", "gc", "--max-bytes", "1")
	wantContains(t, "gc", r.stdout, "3 deleted (6 cards, 3 inbox entries", "deleted: r-1 r-2 r-3")
	cm.must(t, 1, "turns", "show", "r-1")
	archives, err := filepath.Glob(filepath.Join(root, "utpmesh-data", "archive", "demo", "*.jsonl"))
	if err != nil || len(archives) != 1 {
		t.Fatalf("archive files: %v, %v", archives, err)
	}
	if n := countLines(t, archives[0]); n != 6 {
		t.Fatalf("archive holds %d cards, want 6", n)
	}
	r = cm.must(t, 0, "turns", "ls")
	if strings.Contains(r.stdout, "r-1") {
		t.Fatalf("turns ls after gc:\n%s", r.stdout)
	}
	r = cm.must(t, 0, "turns", "retention", "--off")
	wantContains(t, "off", r.stdout, "project demo: keep every turn")
}

// TestRetentionOpsAdminOnly: the delete operations are the core's and
// the admin's: an agent or a worker that publishes on them gets a
// permissions violation, and the admin's delete works.
func TestRetentionOpsAdminOnly(t *testing.T) {
	ctx := context.Background()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quietLog, Auth: &mesh.AuthConfig{},
		Identities: &mesh.IdentityConfig{Workers: []meshauth.Identity{
			{Role: meshauth.RoleWorker, Service: "echo", Tools: []meshauth.Tool{{Name: "echo", Target: "echo"}}},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	url := m.ClientURL()
	v := subjects.DefaultVersion
	for _, who := range []string{"agent-demo", "worker-echo"} {
		a, err := connectAs(t, url, m.CredsFile(who))
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range []string{"svc.cardstore." + natsstore.OpDeleteTurn, "svc.inbox.delete_turn"} {
			subj := "cg." + v + ".demo.main." + op
			if err := a.nc.Publish(subj, []byte(`{"agent_turn_id":"t"}`)); err != nil {
				t.Fatal(err)
			}
			a.waitViolation(t, "publish", subj)
		}
	}
	admin, err := connectAs(t, url, m.CredsFile("admin"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := natsstore.NewClient(admin.nc)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := st.DeleteTurn(ctx, "demo", "no-such-turn"); err != nil || n != 0 {
		t.Fatalf("admin delete_turn: %d, %v", n, err)
	}
	ic, err := natsinbox.NewClient(admin.nc)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ic.DeleteTurn(ctx, "demo", "no-such-turn"); err != nil || n != 0 {
		t.Fatalf("admin inbox delete_turn: %d, %v", n, err)
	}
}

// TestCLICompact: compact refuses a data directory a mesh holds, and with
// the mesh stopped shrinks its bbolt files to what they hold; the mesh
// then starts on them and reads its turns.
func TestCLICompact(t *testing.T) {
	dir := t.TempDir()
	start := func() *cliMesh {
		m, err := mesh.Start(context.Background(), mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quietLog,
			Tools: []worker.Tool{echo.Tool()}, Retention: retention.Config{Policies: keepPolicy{}}})
		if err != nil {
			t.Fatal(err)
		}
		return &cliMesh{m: m, url: m.ClientURL()}
	}
	cm := start()
	for i := range 30 {
		cm.must(t, 0, "call", "echo", "--turn", fmt.Sprintf("c-%d", i), "--args", `{"pad":"`+strings.Repeat("x", 4000)+`"}`)
	}
	r := cm.must(t, 0, "turns", "gc", "--max-bytes", "1", "--archive", filepath.Join(t.TempDir(), "archive"))
	wantContains(t, "gc", r.stdout, "30 deleted (60 cards")
	cm.must(t, 0, "call", "echo", "--turn", "kept", "--args", `{"a":1}`)
	r = cm.must(t, 1, "compact", "--data", dir)
	wantContains(t, "while running", r.stderr, "in use by", "stop the mesh first")
	if err := cm.m.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := fileSizeOf(t, filepath.Join(dir, "cards.db"))
	r = cm.must(t, 0, "compact", "--data", dir)
	wantContains(t, "compact", r.stdout, "cards.db", "registry.db", "checked", "files:")
	t.Logf("utpmesh compact:\n%s", r.stdout)
	if after := fileSizeOf(t, filepath.Join(dir, "cards.db")); after >= before {
		t.Fatalf("cards.db: %d bytes before compaction, %d after", before, after)
	}
	cm = start()
	t.Cleanup(func() { _ = cm.m.Stop(context.Background()) })
	r = cm.must(t, 0, "turns", "show", "kept")
	wantContains(t, "after compaction", r.stdout, "1 call (1 success)")
	r = cm.must(t, 2, "compact", "--data", filepath.Join(dir, "nope"))
	wantContains(t, "missing dir", r.stderr, "--data")
}

// keepPolicy gives no project a retention policy (the sweeper runs and
// removes nothing); `turns gc --max-bytes` does the deleting.
type keepPolicy struct{}

func (keepPolicy) Policy(context.Context, string) (retention.Policy, bool, error) {
	return retention.Policy{}, false, nil
}

func fileSizeOf(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}
