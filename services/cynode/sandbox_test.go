package cynode_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/services/cynode"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/store"
)

// needBwrap skips without bubblewrap, unless UTPMESH_REQUIRE_BWRAP=1
// (make test), where its absence fails the test.
func needBwrap(t *testing.T) {
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

func startSandbox(t *testing.T) *ct.Harness {
	t.Helper()
	needBwrap(t)
	cfg := ct.Config()
	// The wall-clock limit is far above the CPU limit: the endless loop
	// must be stopped by its 2 CPU-seconds, which a loaded machine may give
	// it only slowly (at 10 s it once got under 2 on a busy 2-core host).
	// Tests of the wall-clock limit pass their own timeout_ms.
	cfg.Sandbox = cynode.SandboxConfig{MemoryBytes: 128 << 20, CPUSeconds: 2, MaxProcs: 32, MaxFileBytes: 1 << 20, MaxOutputBytes: 4096, TimeoutMS: 25000, JobDirBytes: 4 << 20}
	h := ct.Start(t, cfg)
	seed(t, h)
	h.OK(ct.PMAgent, "sandbox.create", map[string]any{"task_id": "t1", "job_id": "j1", "image_ref": "builtin:host-usr"})
	return h
}

func sbExec(cmd string, argv ...string) map[string]any {
	if argv == nil {
		argv = []string{}
	}
	return map[string]any{"task_id": "t1", "job_id": "j1", "command": cmd, "argv": argv}
}

func TestSandboxLifecycle(t *testing.T) {
	h := startSandbox(t)
	h.OK(ct.PMAgent, "sandbox.put_file", map[string]any{"task_id": "t1", "job_id": "j1", "path": "in/hello.txt", "content_bytes_base64": b64("hello\n")})
	r := h.OK(ct.PMAgent, "sandbox.exec", sbExec("/bin/sh", "-c", "cat in/hello.txt; echo oops >&2; pwd; id -u; tr a-z A-Z < in/hello.txt > out.txt; exit 3"))
	if r["exit_code"] != float64(3) || !strings.HasPrefix(ct.Str(r, "stdout"), "hello\n/work\n2") || ct.Str(r, "stderr") != "oops\n" || r["limit_hit"] != nil {
		t.Fatalf("exec = %v", r)
	}
	got := h.OK(ct.PMAgent, "sandbox.get_file", map[string]any{"task_id": "t1", "job_id": "j1", "path": "out.txt"})
	if got["content_bytes_base64"] != b64("HELLO\n") {
		t.Fatalf("get_file = %v", got)
	}
	logs := h.OK(ct.PMAgent, "sandbox.stream_logs", map[string]any{"task_id": "t1", "job_id": "j1", "limit_bytes": 10})
	if logs["next_offset"] != float64(10) || logs["eof"] != false {
		t.Fatalf("stream_logs page 1 = %v", logs)
	}
	rest := h.OK(ct.PMAgent, "sandbox.stream_logs", map[string]any{"task_id": "t1", "job_id": "j1", "offset": 10})
	if all := ct.Str(logs, "data") + ct.Str(rest, "data"); !strings.Contains(all, `exec ["/bin/sh","-c"`) || !strings.Contains(all, "oops") || !strings.Contains(all, "[exit 3]") || rest["eof"] != true {
		t.Fatalf("logs = %q", all)
	}
	h.Fail(ct.PMAgent, "sandbox.create", map[string]any{"task_id": "t1", "job_id": "j1", "image_ref": "builtin:host-usr"}, "already_exists")
	h.OK(ct.PMAgent, "sandbox.destroy", map[string]any{"task_id": "t1", "job_id": "j1"})
	h.Fail(ct.PMAgent, "sandbox.exec", sbExec("/bin/true"), "not_found")
	h.Fail(ct.PMAgent, "sandbox.create", map[string]any{"task_id": "t1", "job_id": "j-foreign", "image_ref": "builtin:host-usr"}, "not_found")
	h.Fail(ct.PMAgent, "sandbox.create", map[string]any{"task_id": "t1", "job_id": "j1", "image_ref": "docker.io/library/python:3.12"}, "policy_violation")
	h.Fail(ct.SandboxAgent, "sandbox.create", map[string]any{"task_id": "t1", "job_id": "j1", "image_ref": "builtin:host-usr"}, "not_allowed")
}

// TestSandboxHostile: each attack is contained, and the result names the
// limit that contained it.
func TestSandboxHostile(t *testing.T) {
	h := startSandbox(t)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	for _, tc := range []struct {
		name  string
		argv  []string
		limit string
		check func(r map[string]any) bool
	}{
		{"fork bomb", []string{"/bin/sh", "-c", "b() { b | b & }; b; sleep 1; echo done"}, "max_procs", nil},
		{"memory hog", []string{"/bin/sh", "-c", `x=$(head -c 400000000 /dev/zero | tr '\0' a); echo ${#x}`}, "memory_bytes", nil},
		{"infinite output", []string{"/usr/bin/yes", "spam"}, "max_output_bytes", func(r map[string]any) bool { return len(ct.Str(r, "stdout")) == 4096 && r["stdout_truncated"] == true }},
		{"endless loop", []string{"/bin/sh", "-c", "while :; do :; done"}, "cpu_seconds", nil},
		{"sleeps forever", []string{"/bin/sleep", "1000"}, "timeout_ms", nil},
		{"huge file", []string{"/bin/sh", "-c", "head -c 5000000 /dev/zero > big"}, "max_file_bytes", nil},
		{"network", []string{"/bin/sh", "-c", `tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; /usr/bin/perl -e 'use Socket; socket(S, PF_INET, SOCK_STREAM, 0) or die "socket: $!\n"; connect(S, pack_sockaddr_in(` + port + `, inet_aton("127.0.0.1"))) or die "connect: $!\n"; print "connected\n"'`}, "", func(r map[string]any) bool {
			// Only its own loopback exists, and the host's server is not on it.
			return ct.Str(r, "stdout") == "lo\n" && strings.Contains(ct.Str(r, "stderr"), "connect: Connection refused") && r["exit_code"] != float64(0)
		}},
		{"host files", []string{"/bin/sh", "-c", "cat /etc/passwd /etc/shadow /root/.bashrc; ls /home; touch /usr/owned"}, "", func(r map[string]any) bool {
			e := ct.Str(r, "stderr")
			return r["exit_code"] != float64(0) && strings.Contains(e, "/etc/passwd: No such file") && strings.Contains(e, "Read-only file system")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := sbExec(tc.argv[0], tc.argv[1:]...)
			if tc.name == "sleeps forever" {
				args["timeout_ms"] = 1000
			}
			r := h.OK(ct.PMAgent, "sandbox.exec", args)
			if tc.limit != "" && r["limit_hit"] != tc.limit {
				t.Fatalf("limit_hit %v, want %s: %v", r["limit_hit"], tc.limit, r)
			}
			if tc.check != nil && !tc.check(r) {
				t.Fatalf("not contained: %v", r)
			}
		})
	}
	if hits.Load() != 0 {
		t.Fatal("the sandbox reached the host's server")
	}
	// The sandbox's uid has no process left. A killed process may still
	// be on its way out (exiting, not yet reaped by its bubblewrap parent)
	// when the call's result is written, so look until none is left; a
	// process that is still there after half a minute was left behind.
	uid := fmt.Sprint(uidOf(t, h))
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, _ := exec.Command("pgrep", "-u", uid, "-c").Output()
		if strings.TrimSpace(string(out)) == "0" {
			break
		}
		if time.Now().After(end) {
			ps, _ := exec.Command("ps", "-o", "pid,stat,etime,args", "-u", uid).Output()
			t.Fatalf("processes left behind: %s\n%s", out, ps)
		}
	}

	t.Run("symlink escape", func(t *testing.T) {
		h.OK(ct.PMAgent, "sandbox.exec", sbExec("/bin/sh", "-c", "ln -s /etc/passwd leak; ln -s / rootlink; mkdir -p d; ln -s ../../.. d/up"))
		for _, p := range []string{"leak", "rootlink/etc/passwd", "d/up/meta.json"} {
			h.Fail(ct.PMAgent, "sandbox.get_file", map[string]any{"task_id": "t1", "job_id": "j1", "path": p}, "policy_violation")
			h.Fail(ct.PMAgent, "sandbox.put_file", map[string]any{"task_id": "t1", "job_id": "j1", "path": p, "content_bytes_base64": b64("pwned")}, "policy_violation")
		}
		for _, p := range []string{"../meta.json", "/etc/passwd"} {
			h.Fail(ct.PMAgent, "sandbox.get_file", map[string]any{"task_id": "t1", "job_id": "j1", "path": p}, "invalid_argument")
		}
		if raw, err := os.ReadFile("/etc/passwd"); err != nil || strings.Contains(string(raw), "pwned") {
			t.Fatalf("/etc/passwd: %v", err)
		}
	})
}

// TestSandboxSeccomp: the seccomp filter refuses what would let a job out
// of its namespaces or at the kernel (issue 23: `unshare -r` gave uid 0 in
// a nested user namespace), while ordinary processes and threads work.
func TestSandboxSeccomp(t *testing.T) {
	h := startSandbox(t)
	py := func(code string) []string { return []string{"/usr/bin/python3", "-c", code} }
	const libc = "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
	for _, tc := range []struct {
		name string
		argv []string
		want string // in stdout+stderr
	}{
		{"filter loaded", []string{"/bin/sh", "-c", "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status"}, "Seccomp:\t2"},
		{"unshare -r (nested user namespace)", []string{"/usr/bin/unshare", "-r", "/usr/bin/id", "-u"}, "Operation not permitted"},
		{"unshare -m (mount namespace)", []string{"/usr/bin/unshare", "-m", "/bin/true"}, "Operation not permitted"},
		{"clone with CLONE_NEWUSER", py(libc + "r = libc.syscall({'x86_64': 56, 'aarch64': 220}[os.uname().machine], 0x10000000 | 17, 0, 0, 0, 0)\nif r == 0: os._exit(0)\nprint('clone', r, os.strerror(ctypes.get_errno()))"), "clone -1 Operation not permitted"},
		{"mount", py(libc + "r = libc.mount(b'none', b'/tmp', b'tmpfs', 0, None); print('mount', r, os.strerror(ctypes.get_errno()))"), "mount -1 Operation not permitted"},
		{"umount", py(libc + "r = libc.umount2(b'/proc', 2); print('umount', r, os.strerror(ctypes.get_errno()))"), "umount -1 Operation not permitted"},
		{"ptrace", py(libc + "r = libc.ptrace(0, 0, 0, 0); print('ptrace', r, os.strerror(ctypes.get_errno()))"), "ptrace -1 Operation not permitted"},
		{"strace", []string{"/usr/bin/strace", "-f", "/bin/true"}, "Operation not permitted"},
		{"keyctl", py(libc + "r = libc.syscall({'x86_64': 250, 'aarch64': 219}[os.uname().machine], 0, -3, 0); print('keyctl', r, os.strerror(ctypes.get_errno()))"), "keyctl -1 Operation not permitted"},
		{"processes and threads still work", []string{"/bin/sh", "-c", "echo a | tr a b; /usr/bin/python3 -c 'import threading; t = threading.Thread(target=print, args=(\"thread\",)); t.start(); t.join()'"}, "b\nthread\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := os.Stat(tc.argv[0]); err != nil {
				t.Skipf("%s is not installed on this host (the built-in image is the host's /usr)", tc.argv[0])
			}
			r := h.OK(ct.PMAgent, "sandbox.exec", sbExec(tc.argv[0], tc.argv[1:]...))
			if out := ct.Str(r, "stdout") + ct.Str(r, "stderr"); !strings.Contains(out, tc.want) {
				t.Fatalf("output %q lacks %q (exit %v)", out, tc.want, r["exit_code"])
			}
		})
	}
}

// TestSandboxJobDirLimit: the work dir holds at most sandbox.job_dir_bytes
// (here 4 MiB): a write beyond fails with ENOSPC inside the job and the
// exec says limit_hit job_dir_bytes; put_file beyond it is refused; /tmp
// is bounded the same way.
func TestSandboxJobDirLimit(t *testing.T) {
	h := startSandbox(t)
	h.OK(ct.PMAgent, "sandbox.destroy", map[string]any{"task_id": "t1", "job_id": "j1"})
	c := h.OK(ct.PMAgent, "sandbox.create", map[string]any{"task_id": "t1", "job_id": "j1", "image_ref": "builtin:host-usr"})
	if c["job_dir_limit"] != "tmpfs" {
		t.Skipf("the work dir is not limited here: %v (%v)", c["job_dir_limit"], c["job_dir_unlimited_reason"])
	}
	// Files of 512 KiB each stay under max_file_bytes (1 MiB).
	fill := "for i in $(seq 1 20); do head -c 524288 /dev/zero > %s/f$i || { echo \"stopped at $i\"; exit 7; }; done"
	r := h.OK(ct.PMAgent, "sandbox.exec", sbExec("/bin/sh", "-c", fmt.Sprintf(fill, ".")))
	if r["exit_code"] != float64(7) || !strings.Contains(ct.Str(r, "stderr"), "No space left on device") || r["limit_hit"] != "job_dir_bytes" {
		t.Fatalf("filling the work dir: %v", r)
	}
	msg := h.Fail(ct.PMAgent, "sandbox.put_file", map[string]any{"task_id": "t1", "job_id": "j1", "path": "more.bin", "content_bytes_base64": b64(strings.Repeat("x", 600<<10))}, "size_limit_exceeded")
	if !strings.Contains(msg, "job_dir_bytes") {
		t.Fatalf("put_file into a full work dir: %s", msg)
	}
	// Removing files frees the room.
	h.OK(ct.PMAgent, "sandbox.exec", sbExec("/bin/sh", "-c", "rm -f f*"))
	h.OK(ct.PMAgent, "sandbox.put_file", map[string]any{"task_id": "t1", "job_id": "j1", "path": "more.bin", "content_bytes_base64": b64(strings.Repeat("x", 600<<10))})
	r = h.OK(ct.PMAgent, "sandbox.exec", sbExec("/bin/sh", "-c", fmt.Sprintf(fill, "/tmp")))
	if r["exit_code"] != float64(7) || r["limit_hit"] != "job_dir_bytes" {
		t.Fatalf("filling /tmp: %v", r)
	}
	h.OK(ct.PMAgent, "sandbox.destroy", map[string]any{"task_id": "t1", "job_id": "j1"})
}

func uidOf(t *testing.T, h *ct.Harness) int {
	t.Helper()
	r := h.OK(ct.PMAgent, "sandbox.exec", sbExec("/usr/bin/id", "-u"))
	var uid int
	fmt.Sscanf(ct.Str(r, "stdout"), "%d", &uid)
	return uid
}

func TestSandboxAllowedImages(t *testing.T) {
	h := startSandbox(t)
	list := h.OK(ct.PMAgent, "sandbox.allowed_images.list", map[string]any{})
	if imgs := list["images"].([]any); len(imgs) != 1 || ct.Str(imgs[0], "image_ref") != "builtin:host-usr" {
		t.Fatalf("list = %v", list)
	}
	add := map[string]any{"image_ref": "docker.io/library/python:3.12", "name": "python", "task_id": "t1"}
	msg := h.Fail(ct.PMAgent, "sandbox.allowed_images.add", add, "access_denied")
	if !strings.Contains(msg, "agents.project_manager.sandbox.allow_add_to_allowed_images") {
		t.Fatalf("gate message: %s", msg)
	}
	h.Fail(ct.PAAgent, "sandbox.allowed_images.list", map[string]any{}, "not_allowed")
	h.Fail(ct.SandboxAgent, "sandbox.allowed_images.add", add, "not_allowed")
	// The operator switches adding on (an agent cannot: TestAgentCannotWidenItsOwnPermissions).
	h.OperatorOK("alice", "db.system_setting.create", map[string]any{"key": "agents.project_manager.sandbox.allow_add_to_allowed_images", "value": true, "value_type": "boolean"})
	added := h.OK(ct.PMAgent, "sandbox.allowed_images.add", add)
	if added["added_by"] != ct.PMAgent {
		t.Fatalf("add = %v", added)
	}
	h.Fail(ct.PMAgent, "sandbox.allowed_images.add", add, "already_exists")
	list = h.OK(ct.PMAgent, "sandbox.allowed_images.list", map[string]any{"limit": 1})
	next := h.OK(ct.PMAgent, "sandbox.allowed_images.list", map[string]any{"limit": 1, "cursor": ct.Str(list, "next_cursor")})
	if ct.Str(next, "images", 0, "image_ref") != "docker.io/library/python:3.12" || ct.Str(next, "images", 0, "added_by") != ct.PMAgent || ct.Str(next, "next_cursor") != "" {
		t.Fatalf("list page 2 = %v", next)
	}
	// Allowed, but never imported: said so.
	if err := h.Service.Store.PutJob(context.Background(), store.Job{ID: "j2", TaskID: "t1"}); err != nil {
		t.Fatal(err)
	}
	msg = h.Fail(ct.PMAgent, "sandbox.create", map[string]any{"task_id": "t1", "job_id": "j2", "image_ref": "docker.io/library/python:3.12"}, "unavailable")
	if !strings.Contains(msg, "not in the local image store") {
		t.Fatalf("unresolvable image: %s", msg)
	}
}
