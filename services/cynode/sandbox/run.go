package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNoBwrap is returned when bubblewrap is not installed.
var ErrNoBwrap = errors.New("bubblewrap (bwrap) is not installed: apt-get install -y bubblewrap (make test-deps)")

// Limit names, as reported in an exec result's limit_hit.
const (
	LimitTimeout = "timeout_ms"
	LimitOutput  = "max_output_bytes"
	LimitCPU     = "cpu_seconds"
	LimitFile    = "max_file_bytes"
	LimitProcs   = "max_procs"
	LimitMemory  = "memory_bytes"
)

// capped keeps the first n bytes and cancels the exec when more come.
type capped struct {
	mu     sync.Mutex
	b      []byte
	n      int
	over   bool
	cancel func()
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.n - len(c.b)
	if len(p) > room {
		c.b = append(c.b, p[:max(room, 0)]...)
		if !c.over {
			c.over = true
			c.cancel()
		}
		return len(p), nil
	}
	c.b = append(c.b, p...)
	return len(p), nil
}

func (c *capped) bytes() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte{}, c.b...), c.over
}

// ExecResult is what an exec returns.
type ExecResult struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	// StdoutTruncated and StderrTruncated say the stream went over
	// max_output_bytes (the exec was then killed).
	StdoutTruncated bool `json:"stdout_truncated"`
	StderrTruncated bool `json:"stderr_truncated"`
	// LimitHit names the limit that ended or crippled the exec ("" none):
	// timeout_ms and max_output_bytes are certain (the service enforced
	// them); cpu_seconds and max_file_bytes come from the signal
	// (SIGXCPU, SIGXFSZ); max_procs and memory_bytes are inferred from a
	// failed fork or allocation (the message or a SIGSEGV/SIGABRT).
	LimitHit   string `json:"limit_hit,omitempty"`
	DurationMS int64  `json:"duration_ms"`
}

// bwrapArgs is the isolation: PID, IPC, UTS, mount, network and cgroup
// namespaces of its own (and, when the service is not root, a user
// namespace), the host's /usr read-only as the only system tree, private
// /proc, /dev and /tmp, the job's work dir at /work, a cleared
// environment, a new session, death with the parent.
func bwrapArgs(work string, root bool) []string {
	ns := []string{"--unshare-all"}
	if root {
		// As root, bwrap sets the sandbox up and setpriv then drops to the
		// sandbox's own uid: no user namespace is needed.
		ns = []string{"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try"}
	}
	return append(ns, "--die-with-parent", "--new-session",
		"--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--bind", work, "/work", "--chdir", "/work", "--hostname", "sandbox",
		"--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/work", "--setenv", "LANG", "C.UTF-8",
		"--")
}

// run executes argv in the sandbox of work as uid with the limits.
func (s *Service) run(ctx context.Context, work string, uid int, argv []string, timeout time.Duration) (ExecResult, error) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return ExecResult{}, ErrNoBwrap
	}
	l := s.cfg
	args := []string{"--nproc=" + strconv.Itoa(l.MaxProcs), "--as=" + strconv.FormatInt(l.MemoryBytes, 10), "--cpu=" + strconv.Itoa(l.CPUSeconds),
		"--fsize=" + strconv.FormatInt(l.MaxFileBytes, 10), "--nofile=256", "--core=0", "--"}
	root := os.Geteuid() == 0
	args = append(append(args, bwrap), bwrapArgs(work, root)...)
	if root {
		id := strconv.Itoa(uid)
		args = append(args, "/usr/bin/setpriv", "--reuid="+id, "--regid="+id, "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--")
	}
	args = append(args, argv...)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "prlimit", args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	outCtx, outCancel := context.WithCancel(ctx)
	defer outCancel()
	stdout := &capped{n: l.MaxOutputBytes, cancel: outCancel}
	stderr := &capped{n: l.MaxOutputBytes, cancel: outCancel}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return ExecResult{}, fmt.Errorf("start the sandbox: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-done:
	case <-outCtx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		werr = <-done
	}
	res := ExecResult{DurationMS: time.Since(start).Milliseconds()}
	var ob, eb []byte
	ob, res.StdoutTruncated = stdout.bytes()
	eb, res.StderrTruncated = stderr.bytes()
	res.Stdout, res.Stderr = strings.ToValidUTF8(string(ob), "\uFFFD"), strings.ToValidUTF8(string(eb), "\uFFFD")
	res.ExitCode = -1
	var ee *exec.ExitError
	switch {
	case werr == nil:
		res.ExitCode = 0
	case errors.As(werr, &ee):
		res.ExitCode = ee.ExitCode()
	}
	// One name, the cause before its symptoms: a fork bomb also floods
	// stderr with "Cannot fork", so max_procs comes before
	// max_output_bytes.
	switch {
	case ctx.Err() != nil:
		res.LimitHit = LimitTimeout
	case strings.Contains(res.Stderr, "Cannot fork") || strings.Contains(res.Stderr, "Resource temporarily unavailable"):
		res.LimitHit = LimitProcs
	case res.StdoutTruncated || res.StderrTruncated:
		res.LimitHit = LimitOutput
	case res.ExitCode == 128+int(syscall.SIGXCPU) || res.ExitCode == 128+int(syscall.SIGKILL) && res.DurationMS >= int64(l.CPUSeconds)*1000:
		res.LimitHit = LimitCPU
	case res.ExitCode == 128+int(syscall.SIGXFSZ) || strings.Contains(res.Stderr, "File size limit exceeded"):
		res.LimitHit = LimitFile
	case res.ExitCode == 128+int(syscall.SIGSEGV) || res.ExitCode == 128+int(syscall.SIGABRT) ||
		strings.Contains(res.Stderr, "MemoryError") || strings.Contains(res.Stderr, "Cannot allocate memory") || strings.Contains(res.Stderr, "out of memory"):
		res.LimitHit = LimitMemory
	}
	return res, nil
}
