package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Job directory limits. A sandbox's work dir (its /work, which lives
// across execs) is a tmpfs of JobDirBytes of its own: a write beyond it
// fails with ENOSPC inside the job (exec: limit_hit job_dir_bytes) and in
// sandbox.put_file (size_limit_exceeded). A root service mounts it on the
// host when the sandbox is created (mountWork); a service that is not
// root keeps it in a holder's namespaces (startHolder). Where neither
// works (no user namespaces) the work dir is not limited and
// sandbox.create says so (job_dir_limit none, with the reason). An exec's
// /tmp is a bwrap tmpfs of the same size either way (--size), gone when
// the exec ends.
const (
	// LimitJobDir is the limit_hit of an exec that filled its work dir or
	// its /tmp.
	LimitJobDir = "job_dir_bytes"
	// JobDirTmpfs and JobDirUnlimited are create's job_dir_limit.
	JobDirTmpfs     = "tmpfs"
	JobDirUnlimited = "none"
)

// jobDirInodes bounds the files of a work dir (a tmpfs counts inodes
// apart from bytes).
const jobDirInodes = 100_000

// canMount reports whether the service may mount the work dirs' tmpfs.
func canMount() bool { return os.Geteuid() == 0 }

// mountWork mounts the work dir's tmpfs, owned by the sandbox's uid.
func mountWork(work string, size int64, uid int) error {
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700,uid=%d,gid=%d", size, jobDirInodes, uid, uid)
	if err := syscall.Mount("tmpfs", work, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount the job directory's tmpfs (%d bytes) on %s: %w", size, work, err)
	}
	return nil
}

// unmountUnder detaches every mount at or below dir (deepest first):
// work dirs of sandboxes being destroyed, of an earlier process, or of
// this one when it closes.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("list mounts: %w", err)
	}
	defer f.Close()
	dir = filepath.Clean(dir)
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("list mounts: %w", err)
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space…).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// jobDirFull reports whether the work dir has no room left (statfs).
func jobDirFull(work string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(work, &st); err != nil {
		return false
	}
	return st.Bavail == 0 || st.Ffree == 0
}

// holder keeps the work dir's tmpfs of a sandbox whose service is not
// root: a process in a user and mount namespace of its own (unshare
// --map-root-user --mount, which needs no privilege where user namespaces
// are allowed) mounts the tmpfs on the work dir in its namespace and
// sleeps. Execs enter its namespaces (nsenter) before bwrap, so their
// /work is that tmpfs; the service reaches the files through
// /proc/<pid>/root (the holder runs as the service's own user). The
// holder dies with the service (Pdeathsig) and when the sandbox is
// destroyed; the content goes with it, as with a root service's tmpfs.
type holder struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startHolder starts the holder of work and waits until its tmpfs is
// mounted.
func startHolder(ctx context.Context, work string, size int64) (*holder, error) {
	for _, bin := range []string{"unshare", "nsenter"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s is not installed (util-linux): %w", bin, err)
		}
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700", size, jobDirInodes)
	cmd := exec.Command("unshare", "--user", "--map-root-user", "--mount", "--propagation", "private", "--",
		"/bin/sh", "-c", `mount -t tmpfs -o "$1" tmpfs "$2" && echo ready && exec sleep infinity`, "cynode-jobdir", opts, work)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("job directory holder: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("job directory holder: %w", err)
	}
	h := &holder{cmd: cmd, done: make(chan struct{})}
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- line == "ready\n"
	}()
	go func() { _ = cmd.Wait(); close(h.done) }()
	select {
	case ok := <-ready:
		if ok {
			return h, nil
		}
	case <-ctx.Done():
	}
	h.stop()
	return nil, fmt.Errorf("job directory holder (unshare --map-root-user --mount, then a tmpfs on %s) did not start: %s", work, strings.TrimSpace(stderr.String()))
}

// alive reports whether the holder still runs.
func (h *holder) alive() bool {
	select {
	case <-h.done:
		return false
	default:
		return true
	}
}

// path is p (a host path) as the holder's mount namespace shows it.
func (h *holder) path(p string) string {
	return fmt.Sprintf("/proc/%d/root%s", h.cmd.Process.Pid, p)
}

// enter is the command prefix that runs a command in the holder's user
// and mount namespaces, keeping the caller's credentials.
func (h *holder) enter() []string {
	return []string{"nsenter", "--target", strconv.Itoa(h.cmd.Process.Pid), "--user", "--mount", "--preserve-credentials", "--"}
}

// stop kills the holder (its tmpfs goes with its namespace) and waits.
func (h *holder) stop() {
	if h == nil {
		return
	}
	_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
	<-h.done
}
