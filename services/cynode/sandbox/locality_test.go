package sandbox_test

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
	"github.com/utpmesh/utpmesh/services/cynode/node"
	"github.com/utpmesh/utpmesh/services/cynode/sandbox"
	"github.com/utpmesh/utpmesh/subjects"
)

// needBwrap skips without bubblewrap, unless UTPMESH_REQUIRE_BWRAP=1
// (make test), where its absence fails the test.
func needBwrap(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"bwrap", "prlimit"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("UTPMESH_REQUIRE_BWRAP") == "1" {
				t.Fatalf("%s is not installed and UTPMESH_REQUIRE_BWRAP=1: run make test-deps", bin)
			}
			t.Skipf("%s is not installed: sandboxes run in bubblewrap with prlimit (make test-deps installs them)", bin)
		}
	}
}

var sbConfig = gateway.SandboxConfig{MemoryBytes: 128 << 20, CPUSeconds: 2, MaxProcs: 32, MaxFileBytes: 1 << 20, MaxOutputBytes: 4096, TimeoutMS: 10000, JobDirBytes: 4 << 20}

// mesh is one NATS server with JetStream and a seeded cynode store that
// every node of a test shares (as the shared state engine gives them).
type mesh struct {
	t   testing.TB
	srv interface {
		Connect(...nats.Option) (*nats.Conn, error)
	}
	d *ct.Direct
}

func newMesh(t testing.TB) *mesh {
	srv := meshtest.NATS(t)
	d := ct.NewDirect(t, nil)
	d.Seed()
	return &mesh{t: t, srv: srv, d: d}
}

// node is one cynode worker's sandbox service with its own connection and
// data directory.
type testNode struct {
	m    *mesh
	svc  *sandbox.Service
	nc   *nats.Conn
	dir  string
	name string
}

// start starts a node named name ("" : from its data dir) in dir (""
// : a new one).
func (m *mesh) start(name, dir string) (*testNode, error) {
	m.t.Helper()
	if dir == "" {
		dir = m.t.TempDir()
	}
	nc, err := m.srv.Connect(nats.Name(m.t.Name() + "-" + name))
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(nc.Close)
	svc, err := sandbox.New(context.Background(), sbConfig, dir)
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(svc.Close)
	err = svc.Serve(context.Background(), sandbox.Locality{Conn: func(context.Context) (*nats.Conn, error) { return nc, nil }, Store: m.d.Store, Node: name})
	return &testNode{m: m, svc: svc, nc: nc, dir: dir, name: svc.Node()}, err
}

func (m *mesh) mustStart(name string) *testNode {
	m.t.Helper()
	n, err := m.start(name, "")
	if err != nil {
		m.t.Fatalf("node %s: %v", name, err)
	}
	return n
}

// direct is the Direct of calls this node takes.
func (n *testNode) direct() *ct.Direct {
	d := n.m.d.For(n.m.t)
	d.Conn = func(context.Context) (*nats.Conn, error) { return n.nc, nil }
	return d
}

func (n *testNode) spec(name string) gateway.Spec {
	return n.m.d.Spec(sandbox.Specs(n.svc), name)
}

func (n *testNode) ok(tool string, args map[string]any) map[string]any {
	n.m.t.Helper()
	return n.direct().OK(n.spec(tool), ct.PMAgent, job(args))
}

func (n *testNode) fail(tool string, args map[string]any, typ, says string) *gateway.Error {
	n.m.t.Helper()
	return n.direct().Fail(n.spec(tool), ct.PMAgent, job(args), typ, says)
}

// sandboxes lists the sandbox directories under the node's data dir.
func (n *testNode) sandboxes() []string {
	ents, _ := os.ReadDir(filepath.Join(n.dir, "sandboxes"))
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func job(args map[string]any) map[string]any {
	out := map[string]any{"task_id": "t1", "job_id": "j1"}
	for k, v := range args {
		out[k] = v
	}
	return out
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

var create = map[string]any{"image_ref": gateway.BuiltinImage}

// TestSandboxFollowsItsNode: a sandbox created on node A is used through
// node B as through A (B forwards every call to A, whose work dir holds
// the files); a second create through B is refused naming A; destroy
// through B removes it from A and from the records.
func TestSandboxFollowsItsNode(t *testing.T) {
	needBwrap(t)
	m := newMesh(t)
	a, b := m.mustStart("node-a"), m.mustStart("node-b")
	a.ok(sandbox.ToolCreate, create)
	if len(a.sandboxes()) != 1 || len(b.sandboxes()) != 0 {
		t.Fatalf("sandbox dirs: A %v, B %v; want one on A only", a.sandboxes(), b.sandboxes())
	}
	b.ok(sandbox.ToolPutFile, map[string]any{"path": "in.txt", "content_bytes_base64": b64("hello\n")})
	for _, n := range []*testNode{a, b} {
		r := n.ok(sandbox.ToolExec, map[string]any{"command": "/bin/sh", "argv": []string{"-c", "tr a-z A-Z < in.txt | tee -a out.txt"}})
		if r["stdout"] != "HELLO\n" || r["exit_code"] != float64(0) {
			t.Fatalf("exec through %s = %v", n.name, r)
		}
	}
	for _, n := range []*testNode{a, b} {
		if got := n.ok(sandbox.ToolGetFile, map[string]any{"path": "out.txt"}); got["content_bytes_base64"] != b64("HELLO\nHELLO\n") {
			t.Fatalf("get_file through %s = %v", n.name, got)
		}
	}
	if logs := b.ok(sandbox.ToolStreamLogs, nil); strings.Count(ct.Str(logs, "data"), "exec [") != 2 {
		t.Fatalf("stream_logs through B = %v; want both execs", logs)
	}
	// A limit hit on A comes back through B as A answered it.
	if r := b.ok(sandbox.ToolExec, map[string]any{"command": "/bin/sh", "argv": []string{"-c", "sleep 5"}, "timeout_ms": 100}); r["limit_hit"] != "timeout_ms" {
		t.Fatalf("timeout through B = %v", r)
	}
	b.fail(sandbox.ToolExec, map[string]any{"command": "/bin/true", "timeout_ms": 999999}, gateway.TypeInvalidArgument, "over sandbox.timeout_ms")
	b.fail(sandbox.ToolCreate, create, gateway.TypeAlreadyExists, "on node node-a")
	a.fail(sandbox.ToolCreate, create, gateway.TypeAlreadyExists, "already has a sandbox")
	if r := b.ok(sandbox.ToolDestroy, nil); r["destroyed"] != true || r["lost"] != nil {
		t.Fatalf("destroy through B = %v", r)
	}
	if len(a.sandboxes()) != 0 {
		t.Fatalf("A keeps %v after destroy", a.sandboxes())
	}
	a.fail(sandbox.ToolExec, map[string]any{"command": "/bin/true"}, gateway.TypeNotFound, "has no sandbox")
	b.fail(sandbox.ToolDestroy, nil, gateway.TypeNotFound, "has no sandbox")
	// A job of another task is refused before any node is asked.
	b.fail(sandbox.ToolExec, map[string]any{"job_id": "j-foreign", "command": "/bin/true"}, gateway.TypeNotFound, "not a job of task t1")
}

// TestSandboxNodeGone: when the node that holds a sandbox stops, a call
// on it through another node fails at once with unavailable naming the
// node (never a wait for the call's deadline); a create takes the record
// over. A node that restarted under the same name answers node_restarted.
func TestSandboxNodeGone(t *testing.T) {
	needBwrap(t)
	m := newMesh(t)
	a, b := m.mustStart("node-a"), m.mustStart("node-b")
	a.ok(sandbox.ToolCreate, create)
	a.svc.Close()
	e := b.fail(sandbox.ToolExec, map[string]any{"command": "/bin/true"}, gateway.TypeUnavailable, "lived on node node-a, which is gone")
	if !strings.Contains(e.Message, "create a new sandbox") || ct.Str(e.Details, "reason") != "node_gone" || ct.Str(e.Details, "node") != "node-a" {
		t.Fatalf("gone error = %+v", e)
	}
	b.fail(sandbox.ToolGetFile, map[string]any{"path": "x"}, gateway.TypeUnavailable, "which is gone")

	// A restarts in its data dir: a new incarnation, its sandboxes reaped.
	a2, err := m.start("node-a", a.dir)
	if err != nil {
		t.Fatal(err)
	}
	b.fail(sandbox.ToolExec, map[string]any{"command": "/bin/true"}, gateway.TypeUnavailable, "lived on node node-a, which has restarted since")
	a2.fail(sandbox.ToolExec, map[string]any{"command": "/bin/true"}, gateway.TypeUnavailable, "which has restarted since")

	// Destroy clears a lost sandbox's record; create works again, on B.
	if r := b.ok(sandbox.ToolDestroy, nil); r["destroyed"] != true || !strings.Contains(ct.Str(r, "lost"), "node-a") {
		t.Fatalf("destroy of a lost sandbox = %v", r)
	}
	b.fail(sandbox.ToolExec, map[string]any{"command": "/bin/true"}, gateway.TypeNotFound, "has no sandbox")
	b.ok(sandbox.ToolCreate, create)
	b.svc.Close()
	// A create where the holder is gone takes the record over.
	a2.ok(sandbox.ToolCreate, create)
	if r := a2.ok(sandbox.ToolExec, map[string]any{"command": "/bin/echo", "argv": []string{"here"}}); r["stdout"] != "here\n" {
		t.Fatalf("exec after take-over = %v", r)
	}
}

// TestSandboxHolderSilent: a holder whose connection lingers but that
// answers nothing (a host lost without closing its connection) fails the
// call after the probe's bound, as gone.
func TestSandboxHolderSilent(t *testing.T) {
	m := newMesh(t)
	c, b := m.mustStart("node-c"), m.mustStart("node-b")
	c.ok(sandbox.ToolCreate, create)
	c.svc.Close()
	subj, err := subjects.NodeServicePattern(subjects.DefaultVersion, sandbox.SubjectService, "node-c")
	if err != nil {
		t.Fatal(err)
	}
	silent, err := c.nc.Subscribe(subj, func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = silent.Unsubscribe() }()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	old := sandbox.ProbeTimeout
	sandbox.ProbeTimeout = 200 * time.Millisecond
	t.Cleanup(func() { sandbox.ProbeTimeout = old })
	b.fail(sandbox.ToolPutFile, map[string]any{"path": "f", "content_bytes_base64": b64("x")}, gateway.TypeUnavailable, "did not answer a probe within 200ms")
}

// TestNodeNames: a node's name is generated once and kept in its data
// dir; a bad one there, or one another live node serves, is refused
// naming what to do.
func TestNodeNames(t *testing.T) {
	m := newMesh(t)
	dir := t.TempDir()
	first, err := m.start("", dir)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, sandbox.NodeFile))
	if err != nil || strings.TrimSpace(string(raw)) != first.name || first.name == "" {
		t.Fatalf("node file %q (%v); node %q", raw, err, first.name)
	}
	_, err = m.start("", dir)
	if !errors.Is(err, sandbox.ErrNodeTaken) || !strings.Contains(err.Error(), sandbox.NodeFile) {
		t.Fatalf("a second live node %s: %v; want ErrNodeTaken naming %s", first.name, err, sandbox.NodeFile)
	}
	first.svc.Close()
	again, err := m.start("", dir)
	if err != nil || again.name != first.name {
		t.Fatalf("restart: node %q, %v; want %q", again.name, err, first.name)
	}
	for _, bad := range []string{"has.dot", "has space", strings.Repeat("x", 65)} {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, sandbox.NodeFile), []byte(bad+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := m.start("", d); !errors.Is(err, sandbox.ErrNodeName) || !strings.Contains(err.Error(), "letters, digits") && !strings.Contains(err.Error(), "1 to 64") {
			t.Errorf("node file %q: %v; want ErrNodeName saying the rule", bad, err)
		}
	}
}

// TestNodeListShowsSandboxNodes: node.list and node.get report each
// sandbox node from its live data: the calling project's sandboxes, the
// count of all, and capacity.
func TestNodeListShowsSandboxNodes(t *testing.T) {
	m := newMesh(t)
	a, b := m.mustStart("node-a"), m.mustStart("node-b")
	a.ok(sandbox.ToolCreate, create)
	// Both nodes answer discovery, however loaded the machine; no worker
	// runtime is there to answer its own discovery, which waits for the
	// first reply as long.
	quiet, first := node.QuietWindow, node.FirstReplyTimeout
	node.QuietWindow, node.FirstReplyTimeout = 2*time.Second, 2*time.Second
	t.Cleanup(func() { node.QuietWindow, node.FirstReplyTimeout = quiet, first })
	d := b.direct()
	specs := node.Specs()
	got := d.OK(d.Spec(specs, node.ToolList), ct.PMAgent, map[string]any{})
	nodes, _ := got["sandbox_nodes"].([]any)
	if len(nodes) != 2 || ct.Str(nodes[0], "node_slug") != "node-a" || ct.Str(nodes[1], "node_slug") != "node-b" {
		t.Fatalf("sandbox_nodes = %v", got["sandbox_nodes"])
	}
	if ct.Str(nodes[0], "sandboxes", 0, "job_id") != "j1" || ct.Get(nodes[0], "sandboxes_total") != float64(1) ||
		ct.Get(nodes[1], "sandboxes_total") != float64(0) || ct.Get(nodes[0], "capacity", "cpus") == float64(0) ||
		ct.Get(nodes[0], "capacity", "job_dir_bytes") != float64(sbConfig.JobDirBytes) {
		t.Fatalf("node-a = %v, node-b = %v", nodes[0], nodes[1])
	}
	// Another project sees the node and the count, not the sandbox.
	other := b.direct()
	other.Project = ct.Other
	got = other.OK(other.Spec(specs, node.ToolList), ct.PMAgent, map[string]any{"tool": sandbox.ToolExec})
	if n := ct.Get(got, "sandbox_nodes", 0); ct.Get(n, "sandboxes_total") != float64(1) || len(ct.Get(n, "sandboxes").([]any)) != 0 {
		t.Fatalf("another project's view of node-a = %v", n)
	}
	one := d.OK(d.Spec(specs, node.ToolGet), ct.PMAgent, map[string]any{"node_slug": "node-a"})
	if one["incarnation"] == "" || ct.Str(one, "sandboxes", 0, "task_id") != "t1" {
		t.Fatalf("node.get node-a = %v", one)
	}
	d.Fail(d.Spec(specs, node.ToolRefresh), ct.PMAgent, map[string]any{"node_slug": "node-a"}, gateway.TypeInvalidArgument, "is a sandbox node")
}

// BenchmarkSandboxCall: a call on a sandbox of node A, taken by A
// (local) or by B (forwarded to A): sandbox.exec of /bin/true, and
// sandbox.stream_logs, which runs no process, so the difference is what
// locality costs a call.
func BenchmarkSandboxCall(b *testing.B) {
	needBwrap(b)
	m := newMesh(b)
	a, other := m.mustStart("node-a"), m.mustStart("node-b")
	a.ok(sandbox.ToolCreate, create)
	for _, tool := range []string{sandbox.ToolExec, sandbox.ToolStreamLogs} {
		for _, bc := range []struct {
			name string
			via  *testNode
		}{{"local", a}, {"forwarded", other}} {
			b.Run(tool+"/"+bc.name, func(b *testing.B) {
				d, sp := bc.via.direct(), bc.via.spec(tool)
				args := job(map[string]any{"command": "/bin/true"})
				if tool == sandbox.ToolStreamLogs {
					args = job(map[string]any{"limit_bytes": 1})
				}
				for b.Loop() {
					if _, err := d.Run(sp, ct.PMAgent, args); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
