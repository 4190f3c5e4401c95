package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/services/cynode/sandbox"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestCynodeNodeSubjectPermissions: the sandbox nodes' subjects
// (cg.<ver>.<project>.<channel>.svc.cynode.node.<node>) and the sandbox
// records bucket are the cynode worker identity's only. worker-cynode, as
// `up` writes it, serves a node subject, reaches another node (up's own
// cynode node answers its probe) and uses the bucket without a
// violation; an agent and another service's worker may neither publish
// nor subscribe there, nor write the bucket.
func TestCynodeNodeSubjectPermissions(t *testing.T) {
	dir := t.TempDir()
	_, banner := startUpInProcess(t, "--data", dir, "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "",
		"--services", "echo,cynode,atp")
	m := regexp.MustCompile(`(?m)^\s+NATS\s+(nats://\S+)`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("no NATS URL in the banner:\n%s", banner)
	}
	url := m[1]
	seed := func(name string) string { return creds.SeedPath(filepath.Join(dir, "creds"), name) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	holder, err := connectAs(t, url, seed(creds.WorkerName("cynode")))
	if err != nil {
		t.Fatal(err)
	}
	caller, err := connectAs(t, url, seed(creds.WorkerName("cynode")))
	if err != nil {
		t.Fatal(err)
	}
	subj, err := subjects.NodeService(subjects.DefaultVersion, "demo", "default", sandbox.SubjectService, "probe-node")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := holder.nc.Subscribe(subj, func(m *nats.Msg) { _ = m.Respond([]byte("here")) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := holder.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if msg, err := deadline.Request(ctx, caller.nc, subj, nil); err != nil || string(msg.Data) != "here" {
		t.Fatalf("worker-cynode reaches a node: %v", err)
	}
	// up's own cynode worker is a node: its name is in its data dir.
	raw, err := os.ReadFile(filepath.Join(dir, sandbox.NodeFile))
	if err != nil {
		t.Fatal(err)
	}
	upNode := strings.TrimSpace(string(raw))
	upSubj, err := subjects.NodeService(subjects.DefaultVersion, "demo", "default", sandbox.SubjectService, upNode)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := deadline.Request(ctx, caller.nc, upSubj, []byte(`{"op":"ping"}`))
	var rep struct {
		Node string `json:"node"`
	}
	if err != nil || json.Unmarshal(msg.Data, &rep) != nil || rep.Node != upNode {
		t.Fatalf("up's node %s answers a probe: %v", upNode, err)
	}
	js, err := jetstream.New(caller.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, sandbox.Bucket)
	if err != nil {
		t.Fatalf("worker-cynode binds %s: %v", sandbox.Bucket, err)
	}
	if _, err := kv.Create(ctx, "probe", []byte("{}")); err != nil {
		t.Fatalf("worker-cynode writes %s: %v", sandbox.Bucket, err)
	}
	if _, err := kv.Get(ctx, "probe"); err != nil {
		t.Fatalf("worker-cynode reads %s: %v", sandbox.Bucket, err)
	}
	for _, a := range []*actor{holder, caller} {
		select {
		case err := <-a.errs:
			t.Fatalf("worker-cynode: permission violation: %v", err)
		default:
		}
	}

	pattern, err := subjects.NodeServicePattern(subjects.DefaultVersion, sandbox.SubjectService, "*")
	if err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{creds.WorkerName("atp"), creds.WorkerName("echo"), "agent-demo"} {
		t.Run(who, func(t *testing.T) {
			a, err := connectAs(t, url, seed(who))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{subj, upSubj, "$KV." + sandbox.Bucket + ".probe", "$JS.API.STREAM.MSG.GET.KV_" + sandbox.Bucket} {
				if err := a.nc.Publish(s, []byte(`{"op":"ping"}`)); err != nil {
					t.Fatal(err)
				}
				a.waitViolation(t, "publish", s)
			}
			if _, err := a.nc.Subscribe(pattern, func(*nats.Msg) {}); err != nil {
				t.Fatal(err)
			}
			a.waitViolation(t, "subscription", pattern)
		})
	}
}

// TestSandboxNodeLossAcrossProcesses: two `utpmesh worker cynode`
// processes, each with its own data directory, serve one mesh. The
// sandbox lives on the worker that took sandbox.create, and every call
// on it through the CLI works whichever worker takes it; once that worker
// is SIGKILLed, the next call fails at once naming its node, and a new
// sandbox.create works on the survivor.
func TestSandboxNodeLossAcrossProcesses(t *testing.T) {
	for _, bin := range []string{"bwrap", "prlimit"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("UTPMESH_REQUIRE_BWRAP") == "1" {
				t.Fatalf("%s is not installed and UTPMESH_REQUIRE_BWRAP=1: run make test-deps", bin)
			}
			t.Skipf("%s is not installed: sandboxes run in bubblewrap with prlimit", bin)
		}
	}
	root := t.TempDir()
	// A killed worker leaves its sandboxes' tmpfs mounted (a root worker
	// mounts them on the host; its next start would unmount them).
	t.Cleanup(func() {
		works, _ := filepath.Glob(filepath.Join(root, "cynode-*", "sandboxes", "*", "work"))
		for _, w := range works {
			_ = syscall.Unmount(w, syscall.MNT_DETACH)
		}
	})
	cm := startServicesMesh(t, root, []string{"echo"}, nil)
	// The mesh serves echo only; its project policy and a mandate let the
	// demo agent invoke the cynode tools the workers bring.
	pol := filepath.Join(root, "cynode.cedar")
	if err := os.WriteFile(pol, []byte(`permit(principal, action == Action::"mcp.tool.invoke", resource);`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	type node struct {
		p   *proc
		dir string
	}
	var nodes []node
	for i := range 2 {
		dir := filepath.Join(root, fmt.Sprintf("cynode-%d", i))
		p := startProc(t, "worker", "--nats", cm.url, "--data", dir, "--metrics-addr", "", "--instance", fmt.Sprintf("cynode-%d", i), "cynode")
		p.waitLine(t, "worker serving")
		nodes = append(nodes, node{p, dir})
	}
	cm.must(t, 0, "policy", "put", "--project", "demo", "--yes", pol)
	mand := strings.TrimSpace(cm.must(t, 0, "mandate", "issue", "--project", "demo", "--agent", "demo-agent", "--policy", pol,
		"--data", filepath.Join(root, "utpmesh-data")).stdout)
	call := func(code int, tool, args string) string {
		t.Helper()
		r := cm.must(t, code, "call", tool, "--mandate", mand, "--json", "--args", args)
		return r.stdout + r.stderr
	}
	const job = `"task_id":"demo-task","job_id":"demo-job"`
	call(0, "sandbox.create", `{`+job+`,"image_ref":"builtin:host-usr"}`)
	holder, survivor := -1, -1
	for i, n := range nodes {
		if ents, _ := os.ReadDir(filepath.Join(n.dir, "sandboxes")); len(ents) == 1 {
			holder = i
		} else {
			survivor = i
		}
	}
	if holder < 0 || survivor < 0 {
		t.Fatal("want the sandbox on exactly one of the two workers")
	}
	call(0, "sandbox.put_file", `{`+job+`,"path":"in.txt","content_bytes_base64":"aGVsbG8K"}`)
	for range 4 {
		wantContains(t, "exec", call(0, "sandbox.exec", `{`+job+`,"command":"/bin/cat","argv":["in.txt"]}`), `hello\n`)
	}
	raw, err := os.ReadFile(filepath.Join(nodes[holder].dir, sandbox.NodeFile))
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimSpace(string(raw))
	if err := nodes[holder].p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = nodes[holder].p.cmd.Wait()
	wantContains(t, "exec on the lost sandbox", call(1, "sandbox.exec", `{`+job+`,"command":"/bin/true","argv":[]}`),
		"lived on node "+name+", which is gone", "create a new sandbox", "upstream_unavailable")
	call(0, "sandbox.create", `{`+job+`,"image_ref":"builtin:host-usr"}`)
	wantContains(t, "exec in the new sandbox", call(0, "sandbox.exec", `{`+job+`,"command":"/bin/echo","argv":["again"]}`), `again\n`)
	if ents, _ := os.ReadDir(filepath.Join(nodes[survivor].dir, "sandboxes")); len(ents) != 1 {
		t.Fatalf("the new sandbox is not on the survivor: %v", ents)
	}
}
