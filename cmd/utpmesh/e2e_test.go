package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/natsinbox"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestMain lets the test binary act as the utpmesh binary, so tests can
// start real worker processes (and kill them) without a separate build.
func TestMain(m *testing.M) {
	if os.Getenv("UTPMESH_TEST_EXEC") == "1" {
		// Like main: SIGINT/SIGTERM start a graceful shutdown.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		os.Exit(run(ctx, os.Args[1:], env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}))
	}
	if err := checkTestBin(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// proc is a utpmesh process started by a test.
type proc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	seen  chan string
}

func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(utpmeshBin(), args...)
	cmd.Env = append(os.Environ(), "UTPMESH_TEST_EXEC=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	p := &proc{cmd: cmd, seen: make(chan string, 1024)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			select {
			case p.seen <- sc.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	return p
}

// waitLine waits for a stderr line containing s.
func (p *proc) waitLine(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l := <-p.seen:
			if strings.Contains(l, s) {
				return
			}
		case <-deadline:
			p.mu.Lock()
			defer p.mu.Unlock()
			t.Fatalf("no line containing %q; output:\n%s", s, strings.Join(p.lines, "\n"))
		}
	}
}

// TestSIGKILLMidExecution kills a real worker process while it executes a
// call, lets another worker take the call over after redelivery, and checks
// that the call ends with exactly one tool.result card and one inbox entry.
func TestSIGKILLMidExecution(t *testing.T) {
	ctx := context.Background()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0"}) // built-ins only: echo runs in the child processes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	url := m.ClientURL()
	workerArgs := []string{"worker", "--nats", url, "--no-gate", "--log-level", "debug", "--claim-lease", "1s", "--ack-wait", "1s", "echo"}

	a := startProc(t, append(workerArgs, "--instance", "worker-a")...)
	a.waitLine(t, "worker serving")

	nc := m.Conn()
	wake := make(chan *nats.Msg, 16)
	wsub, _ := subjects.WakeupPattern(subjects.DefaultVersion, "demo", "*", "agent-k")
	if _, err := nc.ChanSubscribe(wsub, wake); err != nil {
		t.Fatal(err)
	}
	turn, callID := "turn-kill", "call-kill"
	content, _ := json.Marshal(card.ToolCallContent{ToolName: "echo", Arguments: json.RawMessage(`{"sleep_ms":3000,"x":1}`), TargetSubject: "cg.v1r3.demo.main.cmd.tool.echo"})
	cc := &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: card.TypeToolCall, Content: content, ToolCallID: callID,
		CreatedAt: time.Now().UTC(), Metadata: card.Metadata{AgentID: "agent-k", AgentTurnID: turn, TurnEpoch: 1, StepID: "s1"}}
	if err := m.Cards().Put(ctx, cc); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	body, _ := json.Marshal(utp.Command{AgentID: "agent-k", AgentTurnID: turn, TurnEpoch: 1, ToolCallID: callID,
		AfterExecution: card.Suspend, ToolCallCardID: cc.CardID, StepID: "s1", ToolName: "echo"})
	if _, err := js.Publish(ctx, "cg.v1r3.demo.main.cmd.tool.echo", body); err != nil {
		t.Fatal(err)
	}

	a.waitLine(t, "executing")
	if err := a.cmd.Process.Kill(); err != nil { // SIGKILL: no cleanup, no report
		t.Fatal(err)
	}
	_ = a.cmd.Wait()

	b := startProc(t, append(workerArgs, "--instance", "worker-b")...)
	b.waitLine(t, "took over the claim")

	select {
	case w := <-wake:
		var wk utp.Wakeup
		if err := json.Unmarshal(w.Data, &wk); err != nil || wk.ToolCallID != callID || wk.Status != card.StatusSuccess {
			t.Fatalf("wakeup = %s", w.Data)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no wakeup after the take-over")
	}

	cards, err := cardstore.AllTurn(ctx, m.Cards(), "demo", turn)
	if err != nil {
		t.Fatal(err)
	}
	results := 0
	for _, c := range cards {
		if c.Type == card.TypeToolResult {
			results++
		}
	}
	if results != 1 {
		t.Fatalf("tool.result cards for the call = %d, want exactly 1", results)
	}
	ic, err := natsinbox.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := ic.List(ctx, "demo", inbox.ListQuery{AgentID: "agent-k", State: inbox.StateAll})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].ToolCallID != callID {
		t.Fatalf("inbox entries = %+v, want exactly one for %s", entries, callID)
	}
	// No second wakeup for the same call.
	select {
	case w := <-wake:
		t.Fatalf("second wakeup: %s", w.Data)
	case <-time.After(500 * time.Millisecond):
	}
}
