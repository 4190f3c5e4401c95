package unrouted_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/unrouted"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// resultDeadline bounds the wait for a sweeper's answer. The tests run
// the sweeper with a grace and an interval below one second, so the answer
// comes well before it; the deadline is generous only so that a loaded
// machine never fails a correct sweeper (it is no timing assertion).
const resultDeadline = 45 * time.Second

// startSweeping starts a mesh serving echo whose own sweeper runs every
// 50 ms with a grace of 300 ms.
func startSweeping(t *testing.T) *mesh.Mesh {
	t.Helper()
	m, err := mesh.Start(context.Background(), mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quiet,
		Tools: []worker.Tool{echo.Tool()}, Unrouted: unrouted.Config{Interval: 50 * time.Millisecond, Grace: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	return m
}

// awaitNotFound waits for the failed not_found result of call (turn
// "turn-<call>") and checks that its message names subject.
func awaitNotFound(t *testing.T, m *mesh.Mesh, call, subject string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(resultDeadline)
	for {
		res, err := m.Cards().FindToolResult(ctx, "demo", "turn-"+call, call)
		if err == nil {
			tr, _ := res.ToolResult()
			var body map[string]string
			_ = json.Unmarshal(tr.Result, &body)
			if tr.Status != card.StatusFailed || body["error_code"] != "not_found" || !strings.Contains(body["error_message"], subject) {
				t.Fatalf("result of %s = %s %s, want failed not_found naming %s", call, tr.Status, tr.Result, subject)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no result for the command on %s after %s (grace 300 ms, sweeps every 50 ms): the sweeper never answered it", subject, resultDeadline)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestUnknownToolAnsweredAfterGrace is the finding "a command for an
// unknown tool got not_found after 5 min 14 s": the sweeps within the
// grace period read the subject, and the reader they left behind (an
// ordered consumer filtering on it, alive for 5 minutes) made the subject
// look served. The answer must come one grace (plus one interval) after
// the command.
func TestUnknownToolAnsweredAfterGrace(t *testing.T) {
	m := startSweeping(t)
	send(t, m, "nosuch", "c-nosuch")
	awaitNotFound(t, m, "c-nosuch", "cg."+v+".demo.main.cmd.tool.nosuch")
}

// TestExtraTokenAnswered is the finding "a command on
// cmd.tool.echo.<extra token> was never answered": echo's consumer
// filters on cmd.tool.echo exactly, so nothing consumes
// cmd.tool.echo.extra, while the sweeper took it for echo's.
func TestExtraTokenAnswered(t *testing.T) {
	m := startSweeping(t)
	subj := "cg." + v + ".demo.main.cmd.tool.echo.extra"
	sendSubject(t, m, subj, "echo", "c-extra")
	awaitNotFound(t, m, "c-extra", subj)
	// echo itself is still served by its worker.
	send(t, m, "echo", "c-echo")
	deadline := time.Now().Add(resultDeadline)
	for {
		res, err := m.Cards().FindToolResult(context.Background(), "demo", "turn-c-echo", "c-echo")
		if err == nil {
			if tr, _ := res.ToolResult(); tr.Status != card.StatusSuccess {
				t.Fatalf("echo's call ended %s %s; the sweeper must leave served subjects to their workers", tr.Status, tr.Result)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("echo's call got no result")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServedDecidedByDurableConsumers: what makes a subject served is a
// durable consumer whose filter matches it ("*" one token, ">" one or
// more); readers do not serve — the sweeper's own reads within the grace
// period, an operator's `nats stream view` (an ordered consumer, with or
// without a filter). A served subject is left to its consumer.
func TestServedDecidedByDurableConsumers(t *testing.T) {
	ctx := context.Background()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quiet, Tools: []worker.Tool{echo.Tool()},
		Unrouted: unrouted.Config{Interval: time.Hour, Grace: -1}}) // swept by the test
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	js, err := jetstream.New(m.Conn())
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, streams.CommandStream(v))
	if err != nil {
		t.Fatal(err)
	}
	// A durable consumer serving a subtree (a tool of another runtime).
	if _, err := stream.CreateOrUpdateConsumer(ctx, streams.ConsumerConfig("utp_tool_tree", []string{"cg." + v + ".*.*.cmd.tool.tree.>"}, time.Minute, -1)); err != nil {
		t.Fatal(err)
	}
	sendSubject(t, m, "cg."+v+".demo.main.cmd.tool.tree.leaf", "tree", "c-tree")
	send(t, m, "viewed", "c-viewed")
	send(t, m, "early", "c-early")
	// A target token outside the token rules: still a command nobody serves.
	sendSubject(t, m, "cg."+v+".demo.main.cmd.tool.ech%0", "nosuch", "c-badtoken")

	// An operator views the stream: ordered consumers, filtered and not.
	for _, f := range [][]string{{"cg." + v + ".demo.main.cmd.tool.viewed"}, nil} {
		oc, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: f})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := oc.FetchNoWait(1); err != nil {
			t.Fatal(err)
		}
	}
	// A sweeper within its grace period reads the subjects first.
	patient, err := unrouted.New(m.Conn(), unrouted.Config{Store: m.Cards(), Registry: m.Registry(), Grace: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := patient.Sweep(ctx); err != nil || st.Unrouted != 3 || st.Waiting != 3 || st.Answered != 0 {
		t.Fatalf("sweep within grace = %+v, %v; want the 3 unserved subjects waiting", st, err)
	}
	st, err := m.Unrouted().Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Unrouted != 3 || st.Answered != 3 {
		t.Fatalf("sweep = %+v; want viewed, early and ech%%0 answered (readers serve nothing), tree left to its consumer", st)
	}
	for _, call := range []string{"c-viewed", "c-early", "c-badtoken"} {
		if _, err := m.Cards().FindToolResult(ctx, "demo", "turn-"+call, call); err != nil {
			t.Fatalf("%s: %v", call, err)
		}
	}
	if _, err := m.Cards().FindToolResult(ctx, "demo", "turn-c-tree", "c-tree"); err == nil {
		t.Fatal("the command on cmd.tool.tree.leaf was answered; a durable consumer on cmd.tool.tree.> serves it")
	}
}
