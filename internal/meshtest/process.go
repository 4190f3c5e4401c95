package meshtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/embednats"
)

// nodeEnv carries a node's spec (JSON) to a child process of the test
// binary; its presence makes RunClusterNode run the node.
const nodeEnv = "UTPMESH_MESHTEST_NODE"

// readyLine is what a child prints on stdout once its node accepts
// connections.
const readyLine = "meshtest-node-ready"

// StartProcessCluster is StartCluster with every node in a child process
// of the test binary, so that Kill is a real SIGKILL: no RAFT leader
// steps down, no peer is told, nothing is flushed, and Restart recovers
// the store as after a crash. The test binary must run the node when it
// is such a child: the package's TestMain calls RunClusterNode first,
//
//	func TestMain(m *testing.M) {
//		meshtest.RunClusterNode()
//		os.Exit(m.Run())
//	}
//
// A child ends when it is killed, or when the test process that started
// it ends (its stdin closes).
func StartProcessCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if os.Getenv(nodeEnv) != "" {
		t.Fatalf("meshtest: StartProcessCluster in a cluster node process: call meshtest.RunClusterNode() first in TestMain")
	}
	return startCluster(t, n, true)
}

// RunClusterNode runs a node of a StartProcessCluster and exits when the
// process was started as one; otherwise it returns at once. Call it first
// in TestMain.
func RunClusterNode() {
	raw := os.Getenv(nodeEnv)
	if raw == "" {
		return
	}
	var spec nodeSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "meshtest node: %s=%q: %v\n", nodeEnv, raw, err)
		os.Exit(2)
	}
	srv, err := embednats.Start(spec.config())
	if err != nil {
		fmt.Fprintf(os.Stderr, "meshtest node %s: %v\n", spec.Name, err)
		os.Exit(1)
	}
	fmt.Println(readyLine)
	// The parent holds our stdin open while it wants us: EOF means it
	// stopped us or it is gone.
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), ClusterWait)
	defer cancel()
	_ = srv.Shutdown(ctx)
	os.Exit(0)
}

// process is a running child node.
type process struct {
	cmd   *exec.Cmd
	stdin io.Closer
	done  chan struct{} // closed when the child has exited
}

// startProcess starts a child running spec and waits for its ready line.
func startProcess(spec nodeSpec) (*process, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	// -test.run=^$: a binary without the TestMain hook runs no test and
	// exits, instead of running the suite again.
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), nodeEnv+"="+string(raw))
	var stderr syncBuffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	cmd.Stdout = &readyWriter{ready: ready}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	select {
	case <-ready:
		return p, nil
	case <-p.done:
	case <-time.After(ClusterWait):
	}
	p.kill()
	msg := strings.TrimSpace(stderr.String())
	if strings.Contains(msg, "address already in use") {
		return nil, fmt.Errorf("%w: %s", embednats.ErrAddrInUse, msg)
	}
	if msg == "" {
		msg = "it printed no ready line: does the test binary's TestMain call meshtest.RunClusterNode() first?"
	}
	return nil, errors.New("node process did not start: " + msg)
}

// kill sends SIGKILL and waits until the child is gone.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
	_ = p.stdin.Close()
}

// readyWriter takes the child's stdout and closes ready when the ready
// line has come.
type readyWriter struct {
	ready chan struct{}
	line  []byte
	done  bool
}

func (w *readyWriter) Write(p []byte) (int, error) {
	if w.done {
		return len(p), nil
	}
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			return len(p), nil
		}
		if string(w.line[:i]) == readyLine {
			w.done, w.line = true, nil
			close(w.ready)
			return len(p), nil
		}
		w.line = w.line[i+1:]
	}
}

// syncBuffer is a bytes.Buffer safe for the writer goroutine of exec.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
