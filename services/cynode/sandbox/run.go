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
	// failed fork or allocation (the message or a SIGSEGV/SIGABRT);
	// job_dir_bytes is certain when the work dir is full after the exec,
	// else inferred from "No space left on device" (a full /tmp).
	LimitHit string `json:"limit_hit,omitempty"`
	// LimitsEnforcedBy says how memory, processes and CPU were limited:
	// "cgroup" (the exec's own cgroup v2: memory.max, pids.max, cpu.max,
	// and an out-of-memory kill or a refused fork is then certain, read
	// from memory.events and pids.events) or "rlimit".
	LimitsEnforcedBy string `json:"limits_enforced_by"`
	DurationMS       int64  `json:"duration_ms"`
}

// seccompFD is the descriptor the filter reaches bwrap on (the first of
// exec.Cmd.ExtraFiles).
const seccompFD = "3"

// bwrapArgs is the isolation: PID, IPC, UTS, mount, network and cgroup
// namespaces of its own (and, when the service is not root, a user
// namespace where the command runs as uid), private /proc and /dev, a /tmp of tmpBytes (mode 1777), the job's work
// dir at /work, a cleared environment, a new session, death with the
// parent, and the seccomp filter (seccompFilter) read from seccompFD. The
// system tree is the host's /usr read-only (rootfs "", the built-in
// image) or an imported image's rootfs read-only as /.
func bwrapArgs(work, rootfs string, root bool, uid int, tmpBytes int64) []string {
	// Not root: a user namespace of its own, where the command runs as the
	// sandbox's uid (mapped to the service's user, or to the holder's).
	ns := []string{"--unshare-all", "--uid", strconv.Itoa(uid), "--gid", strconv.Itoa(uid)}
	if root {
		// As root, bwrap sets the sandbox up and setpriv then drops to the
		// sandbox's own uid: no user namespace is needed.
		ns = []string{"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try"}
	}
	args := append(ns, "--die-with-parent", "--new-session", "--seccomp", seccompFD)
	if rootfs == "" {
		args = append(args, "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
			"--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin")
	} else {
		args = append(args, "--ro-bind", rootfs, "/")
	}
	return append(args, "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", strconv.FormatInt(tmpBytes, 10), "--tmpfs", "/tmp",
		"--bind", work, "/work", "--chdir", "/work", "--hostname", "sandbox",
		"--clearenv", "--setenv", "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "--setenv", "HOME", "/work", "--setenv", "LANG", "C.UTF-8")
}

// dropArgs are setpriv's: the sandbox's uid and gid, no groups, no
// capabilities, no_new_privs.
func dropArgs(uid int) []string {
	id := strconv.Itoa(uid)
	return []string{"--reuid=" + id, "--regid=" + id, "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"}
}

// job is what one exec runs in.
type job struct {
	work   string
	rootfs string // "" for the built-in image
	uid    int
	// limited: work is a tmpfs of its own (mountWork or a holder's).
	limited bool
	// view is work as the service reaches it (statfs); enter, when set,
	// runs the exec in the holder's namespaces.
	view  string
	enter []string
}

// run executes argv in the sandbox of j with the limits.
func (s *Service) run(ctx context.Context, j job, argv []string, timeout time.Duration) (ExecResult, error) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return ExecResult{}, ErrNoBwrap
	}
	l := s.cfg
	var cg *execCgroup
	if s.cgroups != nil {
		if cg, err = s.cgroups.newExec(l.MemoryBytes, l.MaxProcs, l.CPUs); err != nil {
			return ExecResult{}, err
		}
		defer cg.killAll()
	}
	args := []string{"--cpu=" + strconv.Itoa(l.CPUSeconds), "--fsize=" + strconv.FormatInt(l.MaxFileBytes, 10), "--nofile=256", "--core=0"}
	if cg == nil {
		args = append(args, "--nproc="+strconv.Itoa(l.MaxProcs), "--as="+strconv.FormatInt(l.MemoryBytes, 10))
	}
	root := os.Geteuid() == 0
	args = append(append(args, "--", bwrap), bwrapArgs(j.work, j.rootfs, root, j.uid, l.JobDirBytes)...)
	if root {
		switch {
		case j.rootfs == "":
			args = append(append(args, "--", "/usr/bin/setpriv"), dropArgs(j.uid)...)
		default:
			h, err := s.helper()
			if err != nil {
				return ExecResult{}, err
			}
			args = append(append(append(args, h.bwrapArgs()...), "--"), append(h.command(), dropArgs(j.uid)...)...)
		}
	} else {
		args = append(args, "--")
	}
	args = append(args, argv...)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	argv0 := "prlimit"
	if len(j.enter) > 0 {
		argv0, args = j.enter[0], append(append(j.enter[1:len(j.enter):len(j.enter)], "prlimit"), args...)
	}
	cmd := exec.CommandContext(ctx, argv0, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cg != nil {
		cg.attach(cmd.SysProcAttr)
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	outCtx, outCancel := context.WithCancel(ctx)
	defer outCancel()
	stdout := &capped{n: l.MaxOutputBytes, cancel: outCancel}
	stderr := &capped{n: l.MaxOutputBytes, cancel: outCancel}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	filter, err := seccompFile()
	if err != nil {
		return ExecResult{}, err
	}
	defer filter.Close()
	cmd.ExtraFiles = []*os.File{filter}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return ExecResult{}, fmt.Errorf("start the sandbox: %w", err)
	}
	_ = filter.Close() // the child holds its copy
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-done:
	case <-outCtx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		werr = <-done
	}
	res := ExecResult{DurationMS: time.Since(start).Milliseconds(), LimitsEnforcedBy: EnforcedByRlimit}
	var oomKills, pidsMax int64
	if cg != nil {
		res.LimitsEnforcedBy = EnforcedByCgroup
		oomKills, pidsMax = cg.event("memory.events", "oom_kill"), cg.event("pids.events", "max")
	}
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
	case oomKills > 0:
		res.LimitHit = LimitMemory
	case pidsMax > 0:
		res.LimitHit = LimitProcs
	case strings.Contains(res.Stderr, "Cannot fork") || strings.Contains(res.Stderr, "Resource temporarily unavailable"):
		res.LimitHit = LimitProcs
	case res.StdoutTruncated || res.StderrTruncated:
		res.LimitHit = LimitOutput
	case res.ExitCode == 128+int(syscall.SIGXCPU) || res.ExitCode == 128+int(syscall.SIGKILL) && res.DurationMS >= int64(l.CPUSeconds)*1000:
		res.LimitHit = LimitCPU
	case res.ExitCode == 128+int(syscall.SIGXFSZ) || strings.Contains(res.Stderr, "File size limit exceeded"):
		res.LimitHit = LimitFile
	case j.limited && jobDirFull(j.view) || strings.Contains(res.Stderr, "No space left on device"):
		res.LimitHit = LimitJobDir
	case res.ExitCode == 128+int(syscall.SIGSEGV) || res.ExitCode == 128+int(syscall.SIGABRT) ||
		strings.Contains(res.Stderr, "MemoryError") || strings.Contains(res.Stderr, "Cannot allocate memory") || strings.Contains(res.Stderr, "out of memory"):
		res.LimitHit = LimitMemory
	}
	return res, nil
}
