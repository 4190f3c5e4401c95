package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestAgentIdentityWakeups: agent identities consume their wakeups
// durably on the durables the core made for them, from real connections.
// A per-agent identity binds its own (a wakeup published while it was
// offline is delivered once it reconnects); one added live with
// `utpmesh identity add agent` finds its durable made without a restart;
// the project-wide identity binds the project's, which holds every agent
// of the project; none may bind another agent's or project's durable, nor
// create a consumer on the wakeup stream; a removed identity's durable
// stays, and the identity added again binds it.
func TestAgentIdentityWakeups(t *testing.T) {
	ctx := context.Background()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quietLog, Tools: []worker.Tool{echo.Tool()},
		Projects: []string{"demo", "other"},
		Identities: &mesh.IdentityConfig{Workers: []meshauth.Identity{
			{Role: meshauth.RoleWorker, Service: "echo", Tools: []meshauth.Tool{{Name: "echo", Target: "echo"}}},
			{Role: meshauth.RoleAgent, Project: "demo", Agent: "alice"}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	url := m.ClientURL()
	client := func(credsFile, project, agentID string) (*actor, *agent.Client) {
		t.Helper()
		a, err := connectAs(t, url, credsFile)
		if err != nil {
			t.Fatal(err)
		}
		c, err := agent.New(a.nc, agent.Config{Project: project, AgentID: agentID, Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return a, c
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	got := make(chan agent.Wakeup, 16)
	handler := func(w agent.Wakeup) error { got <- w; return nil }
	next := func(who string) agent.Wakeup {
		t.Helper()
		select {
		case w := <-got:
			return w
		case <-cctx.Done():
			t.Fatalf("%s: no wakeup delivered", who)
		}
		return agent.Wakeup{}
	}
	noViolation := func(who string, a *actor) {
		t.Helper()
		select {
		case err := <-a.errs:
			t.Fatalf("%s hit %v", who, err)
		default:
		}
	}

	// alice's durable: made by the core, a pull consumer on her filter.
	js, _ := jetstream.New(m.Conn())
	wake := streams.WakeupStream(subjects.DefaultVersion)
	dur, err := js.Consumer(cctx, wake, streams.AgentWakeupConsumer("demo", "alice"))
	if err != nil {
		t.Fatalf("alice's wakeup durable: %v", err)
	}
	if cfg := dur.CachedInfo().Config; cfg.DeliverSubject != "" || cfg.FilterSubject != "cg."+subjects.DefaultVersion+".demo.*.cmd.agent.alice.wakeup" {
		t.Fatalf("alice's durable: deliver %q, filter %q", cfg.DeliverSubject, cfg.FilterSubject)
	}

	// alice binds it, stops, dispatches while no consumer runs, goes
	// away; a new connection gets the wakeup.
	aliceFile := m.CredsFile("agent-demo.alice")
	a1, alice1 := client(aliceFile, "demo", "alice")
	stop, err := alice1.Wakeups(cctx, handler)
	if err != nil {
		t.Fatalf("alice's Wakeups: %v", err)
	}
	_ = stop()
	p, err := alice1.Dispatch(cctx, agent.CallRequest{ToolName: echo.Name, AgentTurnID: "turn-offline"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		st, err := alice1.Resume(cctx, "turn-offline")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Unconsumed) == 1 && st.Unconsumed[0].Entry != nil {
			break // reported: its wakeup is in the stream
		}
		select {
		case <-cctx.Done():
			t.Fatal("no result in the inbox")
		case <-time.After(50 * time.Millisecond):
		}
	}
	noViolation("alice", a1)
	a1.nc.Close()
	select {
	case w := <-got:
		t.Fatalf("a stopped consumer delivered %+v", w)
	default:
	}
	a2, alice2 := client(aliceFile, "demo", "alice")
	stop, err = alice2.Wakeups(cctx, handler)
	if err != nil {
		t.Fatalf("alice's Wakeups after reconnecting: %v", err)
	}
	if w := next("alice after reconnecting"); w.ToolCallID != p.ToolCallID || w.AgentID != "alice" || w.Channel != agent.DefaultChannel {
		t.Fatalf("wakeup = %+v, want call %s", w, p.ToolCallID)
	}
	_ = stop()
	noViolation("alice", a2)

	// A consumer of her own making, another agent's durable, the
	// project's: refused.
	for _, tc := range []struct {
		name string
		opt  agent.WakeupsOption
		subj string // the refused request
	}{
		{"use a consumer of her own naming", agent.WithDurable("alice_own"), "$JS.API.CONSUMER.INFO." + wake + ".alice_own"},
		{"bind bob's durable", agent.WithDurable(streams.AgentWakeupConsumer("demo", "bob")), "$JS.API.CONSUMER.INFO." + wake + "." + streams.AgentWakeupConsumer("demo", "bob")},
		{"bind the project's durable", agent.WithProjectWakeups(), "$JS.API.CONSUMER.INFO." + wake + "." + streams.AgentWakeupConsumer("demo", "")},
		{"change her durable's ack wait", agent.WithAckWait(time.Hour), "$JS.API.CONSUMER.CREATE." + wake + "." + streams.AgentWakeupConsumer("demo", "alice")},
	} {
		t.Run("alice may not "+tc.name, func(t *testing.T) {
			rctx, rcancel := context.WithTimeout(cctx, 3*time.Second)
			defer rcancel()
			if _, err := alice2.Wakeups(rctx, handler, tc.opt); !errors.Is(err, agent.ErrNoDurable) || !strings.Contains(err.Error(), "agent-demo.alice binds") {
				t.Fatalf("Wakeups = %v, want ErrNoDurable saying which durable alice binds", err)
			}
			a2.waitViolation(t, "publish", tc.subj)
		})
	}

	// An agent identity added live finds its durable made.
	cm := &cliMesh{m: m, url: url}
	seeds := filepath.Join(t.TempDir(), "creds")
	r := cm.must(t, 0, "identity", "add", "agent", "demo/bob", "--creds", m.CredsFile("admin"), "--creds-dir", seeds)
	wantContains(t, "identity add agent", r.stdout, "agent-demo.bob admitted (no restart)", streams.AgentWakeupConsumer("demo", "bob"))
	ab, bob := client(creds.SeedPath(seeds, "agent-demo.bob"), "demo", "bob")
	stop, err = bob.Wakeups(cctx, handler)
	if err != nil {
		t.Fatalf("bob's Wakeups (identity added live): %v", err)
	}
	pb, err := bob.Dispatch(cctx, agent.CallRequest{ToolName: echo.Name, AgentTurnID: "turn-bob"})
	if err != nil {
		t.Fatal(err)
	}
	if w := next("bob"); w.ToolCallID != pb.ToolCallID || w.AgentID != "bob" {
		t.Fatalf("bob's wakeup = %+v, want call %s", w, pb.ToolCallID)
	}
	_ = stop()
	noViolation("bob", ab)
	// Removed, its durable stays; added again, bob binds it again.
	cm.must(t, 0, "identity", "remove", "agent-demo.bob", "--creds", m.CredsFile("admin"))
	if _, err := js.Consumer(cctx, wake, streams.AgentWakeupConsumer("demo", "bob")); err != nil {
		t.Fatalf("bob's durable after identity remove: %v", err)
	}
	cm.must(t, 0, "identity", "add", "agent", "demo/bob", "--creds", m.CredsFile("admin"), "--creds-dir", seeds)
	_, bob = client(creds.SeedPath(seeds, "agent-demo.bob"), "demo", "bob")
	stop, err = bob.Wakeups(cctx, handler)
	if err != nil {
		t.Fatalf("bob's Wakeups after identity remove and add: %v", err)
	}
	_ = stop()

	// The project-wide identity binds the project's durable: every
	// agent's wakeups of demo, alice's and bob's among them.
	ad, wide := client(m.CredsFile("agent-demo"), "demo", "runtime")
	stop, err = wide.Wakeups(cctx, handler, agent.WithProjectWakeups())
	if err != nil {
		t.Fatalf("agent-demo's project Wakeups: %v", err)
	}
	seen := map[string]bool{}
	for !seen[p.ToolCallID] || !seen[pb.ToolCallID] {
		w := next("agent-demo")
		if !strings.HasPrefix(w.AgentTurnID, "turn-") {
			t.Fatalf("project wakeup %+v", w)
		}
		seen[w.ToolCallID] = true
	}
	_ = stop()
	noViolation("agent-demo", ad)

	// Project other's identity may not bind demo's.
	ao, other := client(m.CredsFile("agent-other"), "other", "runtime")
	rctx, rcancel := context.WithTimeout(cctx, 3*time.Second)
	defer rcancel()
	demoWake := streams.AgentWakeupConsumer("demo", "")
	if _, err := other.Wakeups(rctx, handler, agent.WithDurable(demoWake)); !errors.Is(err, agent.ErrNoDurable) {
		t.Fatalf("agent-other binding demo's durable = %v, want ErrNoDurable", err)
	}
	ao.waitViolation(t, "publish", "$JS.API.CONSUMER.INFO."+wake+"."+demoWake)
	stop, err = other.Wakeups(cctx, handler, agent.WithProjectWakeups())
	if err != nil {
		t.Fatalf("agent-other's project Wakeups: %v", err)
	}
	_ = stop()
}
