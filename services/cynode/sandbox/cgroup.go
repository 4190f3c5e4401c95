package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// How an exec's memory, processes and CPU are limited (an exec result's
// limits_enforced_by).
const (
	EnforcedByCgroup = "cgroup"
	EnforcedByRlimit = "rlimit"
)

// cgroupControllers are what an exec's cgroup needs.
var cgroupControllers = []string{"memory", "pids", "cpu"}

// cgroups is a cgroup v2 directory whose children get the memory, pids
// and cpu controllers: one child per exec.
type cgroups struct {
	dir string
	seq atomic.Int64
}

// setupCgroups finds where execs get their cgroups, or says why they
// cannot ("" dir: automatic, under the service's own cgroup).
func setupCgroups(dir string) (*cgroups, string) {
	if dir == "off" {
		return nil, "sandbox.cgroup is \"off\""
	}
	if dir == "" {
		own, err := ownCgroup()
		if err != nil {
			return nil, err.Error()
		}
		dir = own
	}
	raw, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Sprintf("%s is not a cgroup v2 directory (%v)", dir, err)
	}
	have := strings.Fields(string(raw))
	for _, c := range cgroupControllers {
		if !contains(have, c) {
			return nil, fmt.Sprintf("the cgroup v2 directory %s offers %v, not the %s controller (on a cgroup v1 or hybrid host it belongs to v1)", dir, have, c)
		}
	}
	reapCgroups(dir)
	// The sub-tree the service owns: it holds no process, so it may
	// enable the controllers for its children.
	sub := filepath.Join(dir, fmt.Sprintf("cynode-sandbox-%d", os.Getpid()))
	if err := os.Mkdir(sub, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Sprintf("cannot create a cgroup under %s (%v); delegate it to the service or set sandbox.cgroup", dir, err)
	}
	enable := "+" + strings.Join(cgroupControllers, " +")
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(enable), 0); err != nil {
		_ = os.Remove(sub)
		return nil, fmt.Sprintf("%s cannot delegate %v to its children (%v: it holds processes or is not delegated); set sandbox.cgroup to a delegated cgroup v2 directory without processes", dir, cgroupControllers, err)
	}
	if err := os.WriteFile(filepath.Join(sub, "cgroup.subtree_control"), []byte(enable), 0); err != nil {
		_ = os.Remove(sub)
		return nil, fmt.Sprintf("%s cannot delegate %v (%v)", sub, cgroupControllers, err)
	}
	return &cgroups{dir: sub}, ""
}

// reapCgroups removes the sub-trees earlier service processes left
// under dir, killing what is still in them.
func reapCgroups(dir string) {
	old, _ := filepath.Glob(filepath.Join(dir, "cynode-sandbox-*"))
	for _, o := range old {
		execs, _ := filepath.Glob(filepath.Join(o, "exec-*"))
		for _, e := range execs {
			(&execCgroup{dir: e}).killAll()
		}
		_ = os.Remove(o)
	}
}

// ownCgroup is the service's cgroup v2 directory.
func ownCgroup() (string, error) {
	raw, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("no /proc/self/cgroup (%v)", err)
	}
	var rel string
	for _, line := range strings.Split(string(raw), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			rel = p
		}
	}
	if rel == "" {
		return "", errors.New("the service is in no cgroup v2 (/proc/self/cgroup has no 0:: line)")
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("no /proc/self/mountinfo (%v)", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(mi))
	for sc.Scan() {
		// id parent major:minor root mountpoint opts... - fstype source superopts
		f := strings.Fields(sc.Text())
		for i, x := range f {
			if x == "-" && i+1 < len(f) && f[i+1] == "cgroup2" && len(f) > 4 {
				return filepath.Join(f[4], strings.TrimPrefix(rel, f[3])), nil
			}
		}
	}
	return "", errors.New("no cgroup v2 file system is mounted")
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// execCgroup is one exec's cgroup.
type execCgroup struct {
	dir string
	fd  *os.File
}

// newExec creates the cgroup of one exec with its limits.
func (c *cgroups) newExec(memory int64, procs int, cpus float64) (*execCgroup, error) {
	dir := filepath.Join(c.dir, "exec-"+strconv.FormatInt(c.seq.Add(1), 10))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("exec cgroup: %w", err)
	}
	e := &execCgroup{dir: dir}
	const period = 100000
	files := [][2]string{
		{"memory.max", strconv.FormatInt(memory, 10)},
		{"memory.swap.max", "0"},
		{"pids.max", strconv.Itoa(procs)},
		{"cpu.max", fmt.Sprintf("%d %d", max(int(cpus*period), 1000), period)},
	}
	for _, f := range files {
		err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0)
		if err != nil && !(f[0] == "memory.swap.max" && errors.Is(err, os.ErrNotExist)) {
			e.remove()
			return nil, fmt.Errorf("exec cgroup %s: %w", f[0], err)
		}
	}
	fd, err := os.Open(dir)
	if err != nil {
		e.remove()
		return nil, fmt.Errorf("exec cgroup: %w", err)
	}
	e.fd = fd
	return e, nil
}

// attach starts the process in the cgroup (clone3 CLONE_INTO_CGROUP).
func (e *execCgroup) attach(a *syscall.SysProcAttr) {
	a.UseCgroupFD = true
	a.CgroupFD = int(e.fd.Fd())
}

// event reads one counter of a *.events file ("oom_kill", "max").
func (e *execCgroup) event(file, key string) int64 {
	raw, err := os.ReadFile(filepath.Join(e.dir, file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// killAll kills every process of the cgroup, waits until it is empty
// and removes it.
func (e *execCgroup) killAll() {
	_ = os.WriteFile(filepath.Join(e.dir, "cgroup.kill"), []byte("1"), 0)
	deadline := time.Now().Add(5 * time.Second)
	for e.event("cgroup.events", "populated") != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	e.remove()
}

func (e *execCgroup) remove() {
	if e.fd != nil {
		_ = e.fd.Close()
	}
	_ = os.Remove(e.dir)
}

// close removes the service's sub-tree (when it is empty).
func (c *cgroups) close() {
	if c != nil {
		_ = os.Remove(c.dir)
	}
}
