package conformance

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is the implementation under test as a process the kit started
// (--exec): it restarts it whenever it exits, until Stop, and can kill it.
type Process struct {
	command string
	out     io.Writer

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool
	starts  int
	done    chan struct{}
}

// StartProcess runs command with `sh -c` in a process group of its own,
// its output going to out, and restarts it each time it exits.
func StartProcess(command string, out io.Writer) (*Process, error) {
	if command == "" {
		return nil, fmt.Errorf("%w: the command to run is empty", ErrConfig)
	}
	if out == nil {
		out = io.Discard
	}
	p := &Process{command: command, out: out, done: make(chan struct{})}
	p.mu.Lock()
	err := p.spawnLocked()
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	go p.supervise()
	return p, nil
}

// spawnLocked starts the command; p.mu is held.
func (p *Process) spawnLocked() error {
	cmd := exec.Command("sh", "-c", p.command)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("conformance: start %q: %w", p.command, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited
	p.starts++
	return nil
}

// supervise restarts the process when it exits, after half a second.
func (p *Process) supervise() {
	defer close(p.done)
	for {
		p.mu.Lock()
		exited := p.exited
		p.mu.Unlock()
		<-exited
		p.mu.Lock()
		stopped := p.stopped
		p.mu.Unlock()
		if stopped {
			return
		}
		time.Sleep(500 * time.Millisecond)
		p.mu.Lock()
		var err error
		if !p.stopped {
			err = p.spawnLocked()
		}
		stopped = p.stopped
		p.mu.Unlock()
		if stopped {
			return
		}
		if err != nil {
			fmt.Fprintf(p.out, "conformance: restart: %v\n", err)
			return
		}
	}
}

// Starts is how many times the process was started.
func (p *Process) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// Kill sends SIGKILL to the running process's group and waits until it
// has exited; the supervisor then starts it again.
func (p *Process) Kill(ctx context.Context) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("conformance: SIGKILL the implementation: %w", err)
	}
	select {
	case <-exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop ends the process for good: SIGTERM to its group, SIGKILL when it
// has not exited after grace.
func (p *Process) Stop(grace time.Duration) {
	p.mu.Lock()
	p.stopped = true
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	<-p.done
}
