package agent_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/services/echo"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestWakeupsDurables: without NATS authentication (admin rights) the
// client makes the durables the mesh makes for agent identities: the
// default one spans every channel of the agent's project, the project's
// every agent; a consumer of the same name with another filter is not
// bound, nor a push consumer; conflicting or invalid options are refused.
func TestWakeupsDurables(t *testing.T) {
	e := startMesh(t)
	ctx := ctxT(t)
	alice := e.client(t, "w-alice")
	aliceB, err := agent.New(e.nc, agent.Config{Project: project, Channel: "other-ch", AgentID: "w-alice", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = aliceB.Close() })
	bob := e.client(t, "w-bob")
	if alice.DurableName() != streams.AgentWakeupConsumer(project, "w-alice") || aliceB.DurableName() != alice.DurableName() {
		t.Fatalf("DurableName = %q / %q, want streams.AgentWakeupConsumer's, the same in every channel", alice.DurableName(), aliceB.DurableName())
	}

	for _, tc := range []struct {
		name string
		opts []agent.WakeupsOption
	}{
		{"project and durable", []agent.WakeupsOption{agent.WithProjectWakeups(), agent.WithDurable("x")}},
		{"nil option", []agent.WakeupsOption{nil}},
		{"durable with a dot", []agent.WakeupsOption{agent.WithDurable("a.b")}},
		{"zero ack wait", []agent.WakeupsOption{agent.WithAckWait(0)}},
	} {
		if _, err := alice.Wakeups(ctx, func(agent.Wakeup) error { return nil }, tc.opts...); !errors.Is(err, agent.ErrInvalid) {
			t.Errorf("%s: Wakeups = %v, want ErrInvalid", tc.name, err)
		}
	}

	// A consumer of alice's default name that filters bob's wakeups is
	// not hers to bind.
	js, _ := jetstream.New(e.nc)
	wake := streams.WakeupStream(subjects.DefaultVersion)
	bobs, _ := subjects.WakeupPattern(subjects.DefaultVersion, project, "*", "w-bob")
	if _, err := js.CreateOrUpdateConsumer(ctx, wake, streams.ConsumerConfig(alice.DurableName(), []string{bobs}, streams.WakeupAckWait, -1)); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Wakeups(ctx, func(agent.Wakeup) error { return nil }); !errors.Is(err, agent.ErrNoDurable) {
		t.Fatalf("Wakeups on a durable filtering bob's wakeups = %v, want ErrNoDurable", err)
	}
	if err := js.DeleteConsumer(ctx, wake, alice.DurableName()); err != nil {
		t.Fatal(err)
	}
	// Nor is a push consumer of that name.
	push := streams.ConsumerConfig(bob.DurableName(), []string{bobs}, streams.WakeupAckWait, -1)
	push.DeliverSubject = "elsewhere"
	if _, err := js.CreateOrUpdateConsumer(ctx, wake, push); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Wakeups(ctx, func(agent.Wakeup) error { return nil }); !errors.Is(err, agent.ErrNoDurable) || !strings.Contains(err.Error(), "push consumer") {
		t.Fatalf("Wakeups on a push consumer = %v, want ErrNoDurable naming it", err)
	}
	if err := js.DeleteConsumer(ctx, wake, bob.DurableName()); err != nil {
		t.Fatal(err)
	}

	// alice's default durable gets her wakeups of every channel; the
	// project's gets bob's too.
	got, all := make(chan agent.Wakeup, 16), make(chan agent.Wakeup, 16)
	stop, err := alice.Wakeups(ctx, func(w agent.Wakeup) error { got <- w; return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stop() }()
	stopAll, err := bob.Wakeups(ctx, func(w agent.Wakeup) error { all <- w; return nil }, agent.WithProjectWakeups())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stopAll() }()
	pb, err := aliceB.Dispatch(ctx, agent.CallRequest{ToolName: echo.Name, AgentTurnID: "turn-wb"})
	if err != nil {
		t.Fatal(err)
	}
	pbob, err := bob.Dispatch(ctx, agent.CallRequest{ToolName: echo.Name, AgentTurnID: "turn-wbob"})
	if err != nil {
		t.Fatal(err)
	}
	next := func(ch chan agent.Wakeup, who string) agent.Wakeup {
		t.Helper()
		select {
		case w := <-ch:
			return w
		case <-ctx.Done():
			t.Fatalf("%s: no wakeup", who)
		}
		return agent.Wakeup{}
	}
	if w := next(got, "alice"); w.ToolCallID != pb.ToolCallID || w.Channel != "other-ch" || w.AgentID != "w-alice" {
		t.Fatalf("alice's wakeup = %+v, want call %s on channel other-ch", w, pb.ToolCallID)
	}
	seen := map[string]string{}
	for len(seen) < 2 {
		w := next(all, "the project's durable")
		seen[w.ToolCallID] = w.AgentID
	}
	if seen[pb.ToolCallID] != "w-alice" || seen[pbob.ToolCallID] != "w-bob" {
		t.Fatalf("the project's durable delivered %v, want alice's %s and bob's %s", seen, pb.ToolCallID, pbob.ToolCallID)
	}
}
