package unrouted_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/unrouted"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
	"github.com/utpmesh/utpmesh/subjects"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const v = subjects.DefaultVersion

// send writes the tool.call card of call and publishes its command on
// cmd.tool.<target> of project demo, channel main.
func send(t *testing.T, m *mesh.Mesh, target, call string) {
	t.Helper()
	sendSubject(t, m, "cg."+v+".demo.main.cmd.tool."+target, target, call)
}

// sendSubject writes the tool.call card of call to tool and publishes its
// command on subject.
func sendSubject(t *testing.T, m *mesh.Mesh, subject, tool, call string) {
	t.Helper()
	ctx := context.Background()
	content, _ := json.Marshal(card.ToolCallContent{ToolName: tool, Arguments: json.RawMessage(`{}`), TargetSubject: subject})
	cc := &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: card.TypeToolCall, ToolCallID: call, Content: content, CreatedAt: time.Now().UTC(),
		Metadata: card.Metadata{AgentID: "a1", AgentTurnID: "turn-" + call, TurnEpoch: 1, StepID: "s1", ToolCallID: call}}
	if err := m.Cards().Put(ctx, cc); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(utp.Command{AgentID: "a1", AgentTurnID: "turn-" + call, TurnEpoch: 1, ToolCallID: call,
		AfterExecution: card.Suspend, ToolCallCardID: cc.CardID, StepID: "s1", ToolName: tool})
	publishOn(t, m, subject, body)
}

func publish(t *testing.T, m *mesh.Mesh, target string, body []byte) {
	t.Helper()
	publishOn(t, m, "cg."+v+".demo.main.cmd.tool."+target, body)
}

func publishOn(t *testing.T, m *mesh.Mesh, subject string, body []byte) {
	t.Helper()
	js, _ := m.Conn().JetStream()
	if _, err := js.Publish(subject, body); err != nil {
		t.Fatal(err)
	}
}

// TestUnroutedCommands: a command on a subject no tool serves is ended
// with a failed not_found result naming the nearest registered target,
// reported (the agent is woken) and removed from the stream; a garbage one
// is dead-lettered; a command of a registered tool without a worker, and
// one within the grace period, are left to wait.
func TestUnroutedCommands(t *testing.T) {
	ctx := context.Background()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quiet, Tools: []worker.Tool{echo.Tool()},
		Unrouted: unrouted.Config{Interval: time.Hour, Grace: -1}}) // swept by the test
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	// A tool that is registered but has no worker running.
	sleepy := (&worker.Tool{Name: "sleepy", Parameters: json.RawMessage(`{"type":"object"}`), Handler: nil}).Entry("demo")
	if _, err := m.Registry().Put(ctx, sleepy); err != nil {
		t.Fatal(err)
	}
	wake := make(chan *nats.Msg, 8)
	wp, _ := subjects.WakeupPattern(v, "demo", "*", "a1")
	if _, err := m.Conn().ChanSubscribe(wp, wake); err != nil {
		t.Fatal(err)
	}
	dead := make(chan *nats.Msg, 8)
	if _, err := m.Conn().ChanSubscribe("cg."+v+".demo.main.evt.sys.deadletter.command", dead); err != nil {
		t.Fatal(err)
	}

	send(t, m, "echo", "c-echo") // its worker's consumer serves it
	send(t, m, "ech0", "c-typo")
	send(t, m, "sleepy", "c-sleepy")
	publish(t, m, "zzz", []byte(`not json`))

	st, err := m.Unrouted().Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Unrouted != 2 || st.Answered != 1 || st.DeadLettered != 1 {
		t.Fatalf("sweep = %+v, want 2 unrouted subjects, 1 answered, 1 dead-lettered", st)
	}
	res, err := m.Cards().FindToolResult(ctx, "demo", "turn-c-typo", "c-typo")
	if err != nil {
		t.Fatalf("no result for the call on cmd.tool.ech0: %v", err)
	}
	tr, _ := res.ToolResult()
	var body map[string]string
	_ = json.Unmarshal(tr.Result, &body)
	if tr.Status != card.StatusFailed || body["error_code"] != "not_found" ||
		!strings.Contains(body["error_message"], "cg."+v+".demo.main.cmd.tool.ech0") || !strings.Contains(body["error_message"], "nearest registered targets: echo") {
		t.Fatalf("result = %s %s, want failed not_found naming the subject and echo", tr.Status, tr.Result)
	}
	for woken := map[string]bool{}; !woken["c-typo"] || !woken["c-echo"]; {
		select {
		case w := <-wake:
			for _, c := range []string{"c-typo", "c-echo"} {
				if strings.Contains(string(w.Data), `"`+c+`"`) {
					woken[c] = true
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("woken for %v; want the answered call and the echo call", woken)
		}
	}
	if r, err := m.Cards().FindToolResult(ctx, "demo", "turn-c-echo", "c-echo"); err != nil {
		t.Fatal(err)
	} else if etr, _ := r.ToolResult(); etr.Status != card.StatusSuccess {
		t.Fatalf("echo's call ended %s; the sweeper must leave served subjects to their workers", etr.Status)
	}
	select {
	case d := <-dead:
		var dl worker.DeadLetter
		if json.Unmarshal(d.Data, &dl) != nil || dl.Source != "unrouted" || !strings.Contains(dl.Subject, "cmd.tool.zzz") {
			t.Fatalf("dead letter = %s", d.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no dead letter for the garbage command on cmd.tool.zzz")
	}
	if _, err := m.Cards().FindToolResult(ctx, "demo", "turn-c-sleepy", "c-sleepy"); err == nil {
		t.Fatal("the command of a registered tool without a worker was answered; it must wait for its worker")
	}

	// Answered commands left the stream: the next sweep finds nothing to do.
	st, err = m.Unrouted().Sweep(ctx)
	if err != nil || st.Unrouted != 0 || st.Answered+st.DeadLettered != 0 {
		t.Fatalf("second sweep = %+v, %v; want nothing unrouted", st, err)
	}

	// Within the grace period a command waits (its worker may be starting).
	patient, err := unrouted.New(m.Conn(), unrouted.Config{Store: m.Cards(), Registry: m.Registry(), Grace: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	send(t, m, "later", "c-later")
	st, err = patient.Sweep(ctx)
	if err != nil || st.Unrouted != 1 || st.Waiting != 1 || st.Answered != 0 {
		t.Fatalf("sweep within grace = %+v, %v; want 1 waiting", st, err)
	}
	if _, err := m.Cards().FindToolResult(ctx, "demo", "turn-c-later", "c-later"); err == nil {
		t.Fatal("a command within the grace period was answered")
	}
}
