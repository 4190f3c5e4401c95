package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/datalock"
	"github.com/utpmesh/utpmesh/pkg/mesh"
)

// runProc runs the test binary as utpmesh with args until it exits and
// returns its exit code and its whole stderr.
func runProc(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(utpmeshBin(), args...)
	cmd.Env = append(os.Environ(), "UTPMESH_TEST_EXEC=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), stderr.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, stderr.String()
}

// wantOneLine checks that a failed start wrote exactly one stderr line,
// the CLI's error line, and nothing from services that never started.
func wantOneLine(t *testing.T, code int, stderr, want string) {
	t.Helper()
	if code != 1 || stderr != want+"\n" {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and exactly this line:\n%s", code, stderr, want)
	}
}

// TestBusyAddress: up on a busy NATS or metrics address, and a worker on
// a busy metrics address, fail at once with one line naming the address and
// what to pass instead; no stray lines from the ATLAS services (up serves
// them all by default).
func TestBusyAddress(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"up nats", []string{"--nats-listen", addr, "--metrics-addr", "", "--ui-listen", ""},
			"utpmesh up: listen " + addr + ": address already in use; is another 'utpmesh up' or nats-server running? pass --nats-listen 127.0.0.1:0 for a free port"},
		{"up ui", []string{"--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", addr},
			"utpmesh up: ui listen " + addr + ": address already in use; is another 'utpmesh up' or 'utpmesh ui' running? pass --ui-listen 127.0.0.1:0 for a free port, or --ui-listen '' for no UI"},
		{"up metrics", []string{"--nats-listen", "127.0.0.1:0", "--metrics-addr", addr, "--ui-listen", ""},
			"utpmesh up: metrics listen " + addr + ": address already in use; is another 'utpmesh up' running? pass --metrics-addr 127.0.0.1:0 for a free port, or --metrics-addr '' for no metrics"},
		{"worker metrics", []string{"worker", "--nats", "nats://127.0.0.1:1", "--metrics-addr", addr, "echo"},
			"utpmesh worker: metrics listen " + addr + ": address already in use; pass another --metrics-addr (127.0.0.1:0 picks a free port)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if args[0] != "worker" {
				args = append([]string{"up", "--data", t.TempDir()}, args...)
			}
			code, stderr := runProc(t, args...)
			wantOneLine(t, code, stderr, tc.want)
		})
	}
}

// TestDataDirInUseCLI: up and a worker whose services keep files refuse a
// data directory that a running mesh holds, naming its pid and command.
func TestDataDirInUseCLI(t *testing.T) {
	dir := t.TempDir()
	m, err := mesh.Start(context.Background(), mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quietLog, Command: "utpmesh up"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	holder := "data directory " + dir + " is in use by pid " + strconv.Itoa(os.Getpid()) + " (utpmesh up, started "
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	tests := []struct {
		name       string
		args       []string
		prefix     string
		suffix     string
		wantHolder bool
	}{
		{"up", []string{"up", "--data", dir, "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", ""},
			"utpmesh up: " + holder, "; stop it, or pass --data with another directory", true},
		// The lock is checked before any port: with every port busy too,
		// the one line names the data directory's holder.
		{"up, ports busy too", []string{"up", "--data", dir, "--nats-listen", addr, "--metrics-addr", addr, "--ui-listen", addr},
			"utpmesh up: " + holder, "; stop it, or pass --data with another directory", true},
		{"worker atlas.tasks", []string{"worker", "--nats", m.ClientURL(), "--data", dir, "atlas.tasks"},
			"utpmesh worker: " + holder, "; stop it, or give this worker its own --data DIR", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr := runProc(t, tc.args...)
			line := strings.TrimSuffix(stderr, "\n")
			if code != 1 || strings.Contains(line, "\n") || !strings.HasPrefix(line, tc.prefix) || !strings.HasSuffix(line, tc.suffix) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and one line %q…%q", code, stderr, tc.prefix, tc.suffix)
			}
		})
	}
}

// TestStaleLockAfterSIGKILL: a SIGKILLed up leaves its LOCK file naming it,
// but the lock died with the process: the next start takes the directory.
func TestStaleLockAfterSIGKILL(t *testing.T) {
	dir := t.TempDir()
	up := startProc(t, "up", "--data", dir, "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "", "--services", "echo", "--log-level", "debug")
	up.waitLine(t, "worker serving")
	if err := up.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = up.cmd.Wait()
	h, err := datalock.Read(dir)
	if err != nil || h == nil || h.PID != up.cmd.Process.Pid || h.Command != "utpmesh up" {
		t.Fatalf("LOCK file after SIGKILL names %+v (%v), want the killed up (pid %d)", h, err, up.cmd.Process.Pid)
	}
	m, err := mesh.Start(context.Background(), mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quietLog})
	if err != nil {
		t.Fatalf("Start after the holder was killed = %v, want the stale lock ignored", err)
	}
	_ = m.Stop(context.Background())
}

// watchWriter collects a process's stderr and signals every write.
type watchWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return w.buf.Write(p)
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitFor waits until the output contains s.
func (w *watchWriter) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for !strings.Contains(w.String(), s) {
		select {
		case <-w.wrote:
		case <-deadline:
			t.Fatalf("no %q in output:\n%s", s, w.String())
		}
	}
}

// TestUpDefaultServicesCleanStop: up with its default services (every
// ATLAS group and echo) starts, and on SIGTERM (while it finishes starting,
// or once it is up) stops and exits 0; every line it logged is in the CLI's
// log format and none is an error.
func TestUpDefaultServicesCleanStop(t *testing.T) {
	tests := []struct{ name, stream, line string }{
		{"while starting", "stderr", "worker serving"},
		{"once up", "stdout", "Press Ctrl-C"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(utpmeshBin(), "up", "--data", t.TempDir(), "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "", "--log-level", "debug")
			cmd.Env = append(os.Environ(), "UTPMESH_TEST_EXEC=1")
			stdout, stderr := &watchWriter{wrote: make(chan struct{}, 1)}, &watchWriter{wrote: make(chan struct{}, 1)}
			cmd.Stdout, cmd.Stderr = stdout, stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if cmd.ProcessState == nil {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
				}
			})
			if tc.stream == "stdout" {
				stdout.waitFor(t, tc.line)
			} else {
				stderr.waitFor(t, tc.line)
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil { // Wait returns after the output is fully copied
				t.Fatalf("up after SIGTERM: %v\n%s", err, stderr.String())
			}
			if !strings.Contains(stdout.String(), "stopped") {
				t.Errorf("stdout lacks \"stopped\":\n%s", stdout.String())
			}
			for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
				if !strings.HasPrefix(l, "time=") || strings.Contains(l, "level=ERROR") {
					t.Errorf("stray or error line: %s", l)
				}
			}
		})
	}
}
