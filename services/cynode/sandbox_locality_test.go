package cynode_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/cynode"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/node"
	"github.com/utpmesh/utpmesh/services/cynode/store"
)

// cynodeWorker is a second cynode worker on a harness's mesh: its own
// data directory (and sandboxes), its own connection and worker runtime,
// consuming the same durables as the mesh's own.
type cynodeWorker struct {
	svc *cynode.Service
	rt  *worker.Runtime
}

func startCynodeWorker(t *testing.T, h *ct.Harness, cfg *cynode.Config) *cynodeWorker {
	t.Helper()
	nc, err := nats.Connect(h.Mesh.ClientURL(), nats.Name(t.Name()+"-worker"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	svc, err := cynode.Open(cynode.Deps{NC: nc, DataDir: t.TempDir(), Config: cfg, Keys: mandate.StaticKeys{h.Key}, Context: ctx, Logger: ct.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	rt, err := worker.Start(ctx, nc, svc.Tools(), worker.WithoutAuthorizer(), worker.WithLogger(ct.Quiet), worker.WithInstanceID("second-"+svc.SandboxNode()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Stop(context.Background()) })
	return &cynodeWorker{svc: svc, rt: rt}
}

// stop stops the worker as a process ends: no more calls, no node.
func (w *cynodeWorker) stop(t *testing.T) {
	t.Helper()
	if err := w.rt.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.svc.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSandboxLocalityTwoWorkers, issue 24's sandbox locality with two
// cynode workers on one mesh: a sandbox created on worker A is used
// through the mesh whichever worker takes each call (the mesh's own
// worker forwards to A); node.list shows where it lives; once A stops, a
// call on it fails at once with unavailable naming A, and a new
// sandbox.create works.
func TestSandboxLocalityTwoWorkers(t *testing.T) {
	needBwrap(t)
	cfg := ct.Config()
	cfg.Sandbox = cynode.SandboxConfig{MemoryBytes: 128 << 20, CPUSeconds: 2, MaxProcs: 32, MaxFileBytes: 1 << 20, MaxOutputBytes: 4096, TimeoutMS: 10000, JobDirBytes: 4 << 20}
	cfg.Seed.Projects = []store.Project{{ID: ct.Project, Slug: "demo", DisplayName: "Demo"}}
	cfg.Seed.Tasks = []store.Task{{ID: "t1", ProjectID: ct.Project, Title: "build", UserID: "alice"}}
	cfg.Seed.Jobs = []store.Job{{ID: "j1", TaskID: "t1"}}
	h := ct.Start(t, cfg)
	a := startCynodeWorker(t, h, cfg)
	nodeA, nodeM := a.svc.SandboxNode(), h.Service.SandboxNode()
	if nodeA == "" || nodeM == "" || nodeA == nodeM {
		t.Fatalf("nodes %q and %q", nodeA, nodeM)
	}
	admitted := &utp.Admission{Principal: utp.PrincipalAgent + ":" + ct.PMAgent, MandateJTI: "jti-test"}
	principal := admitted.Principal
	args := func(extra map[string]any) map[string]any {
		out := map[string]any{"task_id": "t1", "job_id": "j1"}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	// Worker A takes the create.
	if r := h.AdmittedOn(a.svc.Tools(), ct.PMAgent, admitted, principal, "sandbox.create", args(map[string]any{"image_ref": "builtin:host-usr"})); r.Status != card.StatusSuccess {
		t.Fatalf("create on A: %+v %v", r.Error, r.Envelope)
	}
	// The mesh's worker takes a put_file: it runs on A.
	if r := h.Admitted(ct.PMAgent, admitted, principal, "sandbox.put_file", args(map[string]any{"path": "in.txt", "content_bytes_base64": b64("hello\n")})); r.Status != card.StatusSuccess {
		t.Fatalf("put_file through the mesh's worker: %+v %v", r.Error, r.Envelope)
	}
	// Both nodes answer discovery, however loaded the machine.
	quiet := node.QuietWindow
	node.QuietWindow = 2 * time.Second
	t.Cleanup(func() { node.QuietWindow = quiet })
	// node.list, through the mesh, says where the sandbox lives.
	nodes := h.OK(ct.PMAgent, "node.list", map[string]any{"tool": "sandbox.exec"})
	where := map[string]float64{}
	for _, n := range nodes["sandbox_nodes"].([]any) {
		where[ct.Str(n, "node_slug")] = ct.Get(n, "sandboxes_total").(float64)
	}
	if where[nodeA] != 1 || where[nodeM] != 0 || len(where) != 2 {
		t.Fatalf("sandbox nodes = %v; want %s holding 1, %s none", where, nodeA, nodeM)
	}
	// Calls through the mesh land on either worker; each runs in A's sandbox.
	for i := range 8 {
		r := h.OK(ct.PMAgent, "sandbox.exec", args(map[string]any{"command": "/bin/cat", "argv": []string{"in.txt"}}))
		if r["stdout"] != "hello\n" {
			t.Fatalf("exec %d = %v", i, r)
		}
	}
	// A stops: the mesh's worker takes every call now and fails it at once.
	a.stop(t)
	res := h.Call(ct.PMAgent, "sandbox.exec", args(map[string]any{"command": "/bin/true", "argv": []string{}}))
	if res.Status != card.StatusFailed || res.Error == nil || res.Error.Code != card.CodeUpstreamUnavailable || res.ErrorType() != "unavailable" ||
		!strings.Contains(res.Error.Message, "lived on node "+nodeA+", which is gone") || !strings.Contains(res.Error.Message, "create a new sandbox") {
		t.Fatalf("exec on a lost sandbox: %s %+v %v", res.Status, res.Error, res.Envelope)
	}
	h.OK(ct.PMAgent, "sandbox.create", args(map[string]any{"image_ref": "builtin:host-usr"}))
	if r := h.OK(ct.PMAgent, "sandbox.exec", args(map[string]any{"command": "/bin/echo", "argv": []string{"again"}})); r["stdout"] != "again\n" {
		t.Fatalf("exec in the new sandbox = %v", r)
	}
}
