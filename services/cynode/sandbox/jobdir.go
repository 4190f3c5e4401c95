package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Job directory limits. A sandbox's work dir (its /work, which lives
// across execs) is a tmpfs of JobDirBytes of its own, mounted by the
// service on the host when the sandbox is created: a write beyond it fails
// with ENOSPC inside the job (exec: limit_hit job_dir_bytes) and in
// sandbox.put_file (size_limit_exceeded). Mounting needs root; a service
// that is not root cannot limit the work dir and says so (create's
// job_dir_limit and a warning at start). An exec's /tmp is a bwrap tmpfs
// of the same size either way (--size), gone when the exec ends.
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
