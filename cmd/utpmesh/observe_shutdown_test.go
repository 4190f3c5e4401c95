package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// sendSlowEcho writes a tool.call card (through the given store; with a
// mandate token in metadata.mandate when one is given) and publishes an echo
// command that sleeps 30 s.
func sendSlowEcho(t *testing.T, nc *nats.Conn, put func(*card.Card) error, mandate, agentID, turn, callID string) {
	t.Helper()
	content, _ := json.Marshal(card.ToolCallContent{ToolName: "echo", Arguments: json.RawMessage(`{"sleep_ms":30000}`), TargetSubject: "cg.v1r3.demo.main.cmd.tool.echo"})
	cc := &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: card.TypeToolCall, Content: content, ToolCallID: callID,
		CreatedAt: time.Now().UTC(), Metadata: card.Metadata{AgentID: agentID, AgentTurnID: turn, TurnEpoch: 1, StepID: "s1"}}
	if mandate != "" {
		raw, _ := json.Marshal(mandate)
		cc.Metadata.Extra = map[string]json.RawMessage{"mandate": raw}
	}
	if err := put(cc); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	body, _ := json.Marshal(utp.Command{AgentID: agentID, AgentTurnID: turn, TurnEpoch: 1, ToolCallID: callID,
		AfterExecution: card.Suspend, ToolCallCardID: cc.CardID, StepID: "s1", ToolName: "echo"})
	if _, err := js.Publish(context.Background(), "cg.v1r3.demo.main.cmd.tool.echo", body); err != nil {
		t.Fatal(err)
	}
}

// exitCode waits for p and returns its exit code.
func (p *proc) exitCode(t *testing.T) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(60 * time.Second):
		t.Fatal("process did not exit after SIGTERM")
		return -1
	}
}

// TestWorkerSIGTERMCancelsInFlight: SIGTERM to a worker process with a slow
// call in flight drains for --drain-timeout, ends the call canceled (result
// card and wakeup), and exits 0.
func TestWorkerSIGTERMCancelsInFlight(t *testing.T) {
	ctx := context.Background()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quietLog}) // built-ins only
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	w := startProc(t, "worker", "--nats", m.ClientURL(), "--no-gate", "--log-level", "debug", "--drain-timeout", "300ms", "--instance", "term-1", "echo") // the mesh has no gate
	w.waitLine(t, "worker serving")

	wake := make(chan *nats.Msg, 4)
	wsub, _ := subjects.WakeupPattern(subjects.DefaultVersion, "demo", "*", "agent-term")
	if _, err := m.Conn().ChanSubscribe(wsub, wake); err != nil {
		t.Fatal(err)
	}
	sendSlowEcho(t, m.Conn(), func(c *card.Card) error { return m.Cards().Put(ctx, c) }, "", "agent-term", "turn-term", "call-term")
	w.waitLine(t, "executing")
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	w.waitLine(t, "drain deadline passed")
	if code := w.exitCode(t); code != 0 {
		t.Fatalf("worker exit code after SIGTERM = %d, want 0", code)
	}
	select {
	case msg := <-wake:
		var wk utp.Wakeup
		if err := json.Unmarshal(msg.Data, &wk); err != nil || wk.ToolCallID != "call-term" || wk.Status != card.StatusCanceled {
			t.Fatalf("wakeup = %s, want call-term canceled", msg.Data)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no wakeup for the call canceled at shutdown")
	}
	res, err := m.Cards().FindToolResult(ctx, "demo", "turn-term", "call-term")
	if err != nil {
		t.Fatal(err)
	}
	if tr, _ := res.ToolResult(); tr.Status != card.StatusCanceled || tr.Error.Code != card.CodeCanceled {
		t.Fatalf("result = %+v", tr)
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	return meshtest.FreePorts(t, 1)[0]
}

// TestUpSIGTERMCancelsInFlight: the same for `utpmesh up`, whose /metrics
// is scraped while it runs; after it exits, the data directory holds the
// canceled result and the inbox entry.
func TestUpSIGTERMCancelsInFlight(t *testing.T) {
	dir := t.TempDir()
	ports := meshtest.FreePorts(t, 2)
	natsPort, metricsPort := ports[0], ports[1]
	up := startProc(t, "up", "--data", dir, "--nats-listen", "127.0.0.1:"+natsPort, "--metrics-addr", "127.0.0.1:"+metricsPort, "--ui-listen", "",
		"--drain-timeout", "300ms", "--log-level", "debug", "--services", "echo")
	up.waitLine(t, "worker serving")
	creds, err := creds.Option(filepath.Join(dir, "creds", "admin.nk")) // up runs with NATS identities
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("nats://127.0.0.1:"+natsPort, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// up runs the Cedar gate with a demo mandate for the demo agent.
	// It writes the file just after the mesh starts: poll for it.
	var mandate []byte
	for deadline := time.Now().Add(30 * time.Second); ; {
		mandate, err = os.ReadFile(filepath.Join(dir, "demo-mandate.jwt"))
		if err == nil && len(strings.TrimSpace(string(mandate))) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("up wrote no demo mandate: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// up admits calls (docs/protocol.md, "Admission"): dispatch through it.
	ag, err := agent.New(nc, agent.Config{Project: "demo", Channel: "main", AgentID: "demo-agent", Mandate: strings.TrimSpace(string(mandate)), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close()
	if _, err := ag.Dispatch(context.Background(), agent.CallRequest{ToolName: "echo", Arguments: json.RawMessage(`{"sleep_ms":30000}`),
		AgentTurnID: "turn-up", ToolCallID: "call-up", TurnEpoch: 1}); err != nil {
		t.Fatal(err)
	}
	up.waitLine(t, "executing")
	scrapeUntil(t, "http://127.0.0.1:"+metricsPort+"/metrics", `utpmesh_worker_in_flight{tool="echo"} 1`)
	if err := up.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := up.exitCode(t); code != 0 {
		t.Fatalf("up exit code after SIGTERM = %d, want 0", code)
	}

	// Reopen the data directory: the call ended canceled and the inbox has
	// its entry (the inbox handled the report before stopping).
	m, err := mesh.Start(context.Background(), mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	res, err := m.Cards().FindToolResult(context.Background(), "demo", "turn-up", "call-up")
	if err != nil {
		t.Fatal(err)
	}
	if tr, _ := res.ToolResult(); tr.Status != card.StatusCanceled {
		t.Fatalf("result after up's SIGTERM = %+v, want canceled", tr)
	}
}
