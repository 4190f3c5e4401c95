package cynode_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/services/cynode"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/internal/imagestore"
)

const testImage = "example.com/cynode/test:1"

// TestSandboxImage: an imported image is the sandbox's whole system tree,
// read-only as /; the command runs as the sandbox's uid; the host's files
// and /usr are not there.
func TestSandboxImage(t *testing.T) {
	needBwrap(t)
	archive := ct.HostImage(t, testImage, map[string]string{"/etc/os-release": "ID=cynode-test\n"})
	cfg := ct.Config()
	cfg.Sandbox = cynode.SandboxConfig{AllowedImages: []string{"builtin:host-usr", testImage, "example.com/cynode/missing:1"},
		Images: []string{archive}, MemoryBytes: 128 << 20, CPUSeconds: 2, MaxProcs: 32, MaxFileBytes: 1 << 20, MaxOutputBytes: 4096, TimeoutMS: 10000}
	h := ct.Start(t, cfg)
	seed(t, h)
	job := map[string]any{"task_id": "t1", "job_id": "j1"}
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range job {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	c := h.OK(ct.PMAgent, "sandbox.create", with("image_ref", testImage))
	if !strings.HasPrefix(ct.Str(c, "image_id"), "sha256:") {
		t.Fatalf("create = %v", c)
	}
	switch c["limits_enforced_by"] {
	case "rlimit":
		if ct.Str(c, "cgroup_unavailable") == "" {
			t.Fatalf("rlimits without saying why cgroups are not used: %v", c)
		}
	case "cgroup":
	default:
		t.Fatalf("limits_enforced_by = %v", c["limits_enforced_by"])
	}
	script := `cat /etc/os-release
while read k v rest; do [ "$k" = Uid: ] && echo "uid $v"; done < /proc/self/status
echo hi > /work/out.txt
[ -e /usr/bin/perl ] || echo "no host usr"
[ -e /etc/passwd ] || echo "no host etc"
echo x > /etc/x 2>/dev/null || echo "root read-only"
echo x > /.cynode/x 2>/dev/null || echo "helper read-only"`
	r := h.OK(ct.PMAgent, "sandbox.exec", with("command", "/bin/sh", "argv", []string{"-c", script}))
	out := ct.Str(r, "stdout")
	for _, want := range []string{"ID=cynode-test\n", "no host usr\n", "no host etc\n", "root read-only\n", "helper read-only\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s\nstderr: %s", want, out, ct.Str(r, "stderr"))
		}
	}
	if os.Geteuid() == 0 && !strings.Contains(out, fmt.Sprintf("uid %d\n", int(c["uid"].(float64)))) {
		t.Errorf("not running as the sandbox's uid %v:\n%s", c["uid"], out)
	}
	if r["limits_enforced_by"] != c["limits_enforced_by"] {
		t.Errorf("exec limits_enforced_by = %v", r["limits_enforced_by"])
	}
	got := h.OK(ct.PMAgent, "sandbox.get_file", with("path", "out.txt"))
	if got["content_bytes_base64"] != b64("hi\n") {
		t.Fatalf("get_file = %v", got)
	}
	// The image's tree on the host is unchanged by the sandbox.
	ims, err := h.Service.ImportImage(context.Background(), archive)
	if err != nil || len(ims) != 1 {
		t.Fatalf("re-import: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ims[0].Rootfs, "etc/x")); !os.IsNotExist(err) {
		t.Fatalf("the sandbox wrote into the image: %v", err)
	}
	h.OK(ct.PMAgent, "sandbox.destroy", job)

	// Imported but not allowed: refused. Allowed but not imported: said so.
	other := ct.HostImage(t, "example.com/cynode/notallowed:1", nil)
	if _, err := h.Service.ImportImage(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	h.Fail(ct.PMAgent, "sandbox.create", with("image_ref", "example.com/cynode/notallowed:1"), "policy_violation")
	msg := h.Fail(ct.PMAgent, "sandbox.create", with("image_ref", "example.com/cynode/missing:1"), "unavailable")
	if !strings.Contains(msg, "sandbox.images") {
		t.Fatalf("missing image: %s", msg)
	}
	// The built-in image still works next to imported ones.
	h.OK(ct.PMAgent, "sandbox.create", with("image_ref", "builtin:host-usr"))
	if r := h.OK(ct.PMAgent, "sandbox.exec", with("command", "/usr/bin/perl", "argv", []string{"-e", "print 1"})); ct.Str(r, "stdout") != "1" {
		t.Fatalf("builtin exec = %v", r)
	}
}

// TestSandboxHostileImage: a configured archive with a hostile entry
// stops the service from starting, naming the archive and the entry.
func TestSandboxHostileImage(t *testing.T) {
	needBwrap(t)
	if _, err := exec.LookPath("ldd"); err != nil {
		t.Skip("ldd is missing: the test image copies the host's binaries")
	}
	archive := ct.HostImage(t, "example.com/cynode/evil:1", map[string]string{"../../escaped": "x"})
	dir := t.TempDir()
	cfg := ct.Config()
	cfg.Sandbox = cynode.SandboxConfig{Images: []string{archive}}
	_, err := cynode.Open(cynode.Deps{NC: nil, Resolve: func(context.Context) (*nats.Conn, error) { return nil, errors.New("unused") }, DataDir: dir, Config: cfg, Logger: ct.Quiet})
	if !errors.Is(err, imagestore.ErrUnsafe) || !strings.Contains(err.Error(), "sandbox.images[0]") || !strings.Contains(err.Error(), "../../escaped") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escaped")); !os.IsNotExist(err) {
		t.Fatal("written outside the data directory")
	}
}
