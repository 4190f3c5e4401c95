package sandbox

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
)

// TestCgroupChoice: the service says which mechanism limits execs and,
// for rlimits, why.
func TestCgroupChoice(t *testing.T) {
	for _, tc := range []struct {
		cgroup, why string
	}{
		{"off", `"off"`},
		{"/nonexistent/cgroup", "not a cgroup v2 directory"},
	} {
		s, err := New(context.Background(), gateway.SandboxConfig{Cgroup: tc.cgroup}, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if by, why := s.LimitsEnforcedBy(); by != EnforcedByRlimit || !strings.Contains(why, tc.why) {
			t.Errorf("cgroup %q: %s (%s), want rlimit saying %q", tc.cgroup, by, why, tc.why)
		}
	}
	if _, err := New(context.Background(), gateway.SandboxConfig{Cgroup: "relative/dir"}, t.TempDir()); err == nil || !strings.Contains(err.Error(), "absolute path") {
		t.Errorf("relative cgroup: %v", err)
	}
}

// TestCgroupLimits: where the service can delegate memory, pids and cpu
// (cgroup v2), a fork bomb and a memory hog are stopped by the exec's
// cgroup, the result says so, and the cgroup is gone afterwards.
func TestCgroupLimits(t *testing.T) {
	for _, bin := range []string{"bwrap", "prlimit"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed", bin)
		}
	}
	s, err := New(context.Background(), gateway.SandboxConfig{MemoryBytes: 64 << 20, MaxProcs: 16, CPUSeconds: 5}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if by, why := s.LimitsEnforcedBy(); by != EnforcedByCgroup {
		t.Skipf("cgroups are not delegated to the service here, so execs use rlimits: %s", why)
	}
	work := t.TempDir()
	if os.Geteuid() == 0 {
		if err := os.Chown(work, 230001, 230001); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ name, script, limit string }{
		{"fork bomb", "b() { b | b & }; b; sleep 1; echo done", LimitProcs},
		{"memory hog", `x=$(head -c 400000000 /dev/zero | tr '\0' a); echo ${#x}`, LimitMemory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := s.run(context.Background(), job{work: work, uid: 230001}, []string{"/bin/sh", "-c", tc.script}, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if r.LimitsEnforcedBy != EnforcedByCgroup || r.LimitHit != tc.limit {
				t.Fatalf("result %+v, want limit %s by cgroup", r, tc.limit)
			}
			if left, _ := filepath.Glob(filepath.Join(s.cgroups.dir, "exec-*")); len(left) != 0 {
				t.Fatalf("exec cgroups left: %v", left)
			}
		})
	}
}

// TestCgroupKillAll: a process started into an exec cgroup (clone into
// cgroup) and everything it forked are killed, and the cgroup removed, at
// the end of the exec. It needs only a writable cgroup v2 directory (no
// controllers), so it runs on hosts where the limits cannot.
func TestCgroupKillAll(t *testing.T) {
	own, err := ownCgroup()
	if err != nil {
		t.Skipf("no cgroup v2 here: %v", err)
	}
	dir := filepath.Join(own, "cynode-test-"+strings.ReplaceAll(t.Name(), "/", "-")+"-"+time.Now().Format("150405.000000"))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup under %s: %v", own, err)
	}
	e := &execCgroup{dir: dir}
	defer e.remove()
	fd, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	e.fd = fd
	cmd := exec.Command("/bin/sh", "-c", "sleep 1000 & sleep 1000 & echo started; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	e.attach(cmd.SysProcAttr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start into the cgroup: %v", err)
	}
	buf := make([]byte, 8)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "started\n" {
		t.Fatalf("read %q: %v", buf, err)
	}
	procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if n := len(strings.Fields(string(procs))); n != 3 {
		t.Fatalf("cgroup.procs holds %d processes, want the shell and its 2 sleeps: %q", n, procs)
	}
	e.killAll()
	if err := cmd.Wait(); err == nil {
		t.Fatal("the shell was not killed")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the cgroup is still there: %v", err)
	}
}
