package main

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestPerAgentIdentity: two agents of one project, each with its own
// identity (agent-demo.alice, agent-demo.bob), call through the Go SDK
// and resume their turns; alice, on the only CardStore and inbox subjects
// her identity may use (her own), cannot list, get, ack or set the epoch
// of bob's inbox, nor get bob's cards, list bob's turns, find his result,
// read his box or put a card into his turn: each is refused by the
// service (forbidden) and audited with actor agent:alice, and bob's
// entry stays pending. The operator's calls are acked on its own inbox
// subject.
func TestPerAgentIdentity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quietLog, Tools: []worker.Tool{echo.Tool()},
		Identities: &mesh.IdentityConfig{Workers: []meshauth.Identity{
			{Role: meshauth.RoleAgent, Project: "demo", Agent: "alice"},
			{Role: meshauth.RoleAgent, Project: "demo", Agent: "bob"},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	as := func(name string) *actor {
		a, err := connectAs(t, m.ClientURL(), m.CredsFile(name))
		if err != nil {
			t.Fatalf("connect as %s: %v", name, err)
		}
		return a
	}
	aliceConn, bobConn, admin, op := as("agent-demo.alice"), as("agent-demo.bob"), as("admin"), as("operator")
	client := func(a *actor, cfg agent.Config) *agent.Client {
		cfg.Project, cfg.Logger = "demo", quietLog
		c, err := agent.New(a.nc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	alice, bob := client(aliceConn, agent.Config{AgentID: "alice"}), client(bobConn, agent.Config{AgentID: "bob"})

	// The happy path with per-agent identities: call, resume.
	outA, err := alice.Call(ctx, agent.CallRequest{ToolName: echo.Name, Arguments: json.RawMessage(`{"who":"alice"}`), AgentTurnID: "t-alice"})
	if err != nil || outA.Result.Status != card.StatusSuccess {
		t.Fatalf("alice's call: %+v, %v", outA, err)
	}
	if st, err := alice.Resume(ctx, "t-alice"); err != nil || len(st.Calls) != 1 {
		t.Fatalf("alice resumes her turn: %+v, %v", st, err)
	}
	outB, err := bob.Call(ctx, agent.CallRequest{ToolName: echo.Name, Arguments: json.RawMessage(`{"who":"bob"}`), AgentTurnID: "t-bob"})
	if err != nil || outB.Result.Status != card.StatusSuccess {
		t.Fatalf("bob's call: %+v, %v", outB, err)
	}
	// A call of bob's whose entry he has not acked yet.
	pd, err := bob.Dispatch(ctx, agent.CallRequest{ToolName: echo.Name, Arguments: json.RawMessage(`{}`), AgentTurnID: "t-bob"})
	if err != nil {
		t.Fatal(err)
	}
	pending := waitEntry(ctx, t, m, "bob", pd.ToolCallID)
	box, err := m.Cards().CreateBox(ctx, "demo", "", []string{outB.ResultCard.CardID})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []*actor{aliceConn, bobConn} {
		select {
		case err := <-a.errs:
			t.Fatalf("a per-agent identity's own path hit a permission violation: %v", err)
		default:
		}
	}

	audits := subscribeAudits(t, admin.nc, subjects.DefaultVersion, 64)
	into := &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: card.TypeAgentThought, CreatedAt: time.Now().UTC(),
		Content: json.RawMessage(`{"text":"planted"}`), Metadata: card.Metadata{AgentID: "alice", AgentTurnID: "t-bob"}}
	for _, tc := range []struct {
		name, service, op string
		do                func() error
	}{
		{"list bob's inbox", "inbox", inbox.OpList, func() error {
			_, err := alice.Inbox().List(ctx, "demo", inbox.ListQuery{AgentID: "bob"})
			return err
		}},
		{"get bob's entry", "inbox", inbox.OpGet, func() error { _, err := alice.Inbox().Get(ctx, "demo", pending); return err }},
		{"ack bob's entry", "inbox", inbox.OpAck, func() error { _, err := alice.Ack(ctx, pending); return err }},
		{"set the epoch of bob's turn", "inbox", inbox.OpSetEpoch, func() error { _, err := alice.SetEpoch(ctx, "t-bob", 9); return err }},
		{"get bob's result card", "cardstore", "get", func() error { _, err := alice.Store().Get(ctx, "demo", outB.ResultCard.CardID); return err }},
		{"get bob's call card", "cardstore", "get_many", func() error {
			_, err := alice.Store().GetMany(ctx, "demo", []string{outB.Call.ToolCallCardID})
			return err
		}},
		{"list bob's turn", "cardstore", "list_turn", func() error { _, err := alice.Resume(ctx, "t-bob"); return err }},
		{"find bob's result", "cardstore", "find_result", func() error {
			_, err := alice.Store().FindToolResult(ctx, "demo", "t-bob", outB.Call.ToolCallID)
			return err
		}},
		{"list bob's turns", "cardstore", "list_turns", func() error {
			_, err := alice.Store().ListTurns(ctx, cardstore.ListTurnsRequest{ProjectID: "demo", AgentID: "bob"})
			return err
		}},
		{"get bob's box", "cardstore", "box_get", func() error { _, err := alice.Store().GetBox(ctx, "demo", box.BoxID); return err }},
		{"put a card into bob's turn", "cardstore", "put", func() error { return alice.Store().Put(ctx, into) }},
	} {
		t.Run("alice may not "+tc.name, func(t *testing.T) {
			err := tc.do()
			if !errors.Is(err, cardstore.ErrForbidden) && !errors.Is(err, inbox.ErrForbidden) {
				t.Fatalf("%s = %v, want forbidden", tc.name, err)
			}
			deadline := time.After(10 * time.Second)
			for {
				select {
				case r := <-audits:
					if r.Service == tc.service && r.Op == tc.op && r.Actor == "agent:alice" && !r.Allowed && r.Code == "forbidden" {
						return
					}
				case <-deadline:
					t.Fatalf("no audit record of the refused %s %s", tc.service, tc.op)
				}
			}
		})
	}
	if e, err := m.Inbox().Get(ctx, "demo", pending); err != nil || e.State != inbox.StatePending {
		t.Fatalf("bob's entry after alice's attempts = %+v, %v; want pending", e, err)
	}
	if _, err := m.Cards().Get(ctx, "demo", into.CardID); !errors.Is(err, cardstore.ErrNotFound) {
		t.Fatalf("alice's card in bob's turn was stored: %v", err)
	}
	if n, err := bob.Ack(ctx, pending); err != nil || n != 1 {
		t.Fatalf("bob acks his entry: %d, %v", n, err)
	}

	// The operator's call: its entry is acked, on op-operator's subject.
	opc := client(op, agent.Config{Operator: meshauth.DefaultOperator})
	outO, err := opc.Call(ctx, agent.CallRequest{ToolName: echo.Name, Arguments: json.RawMessage(`{}`), AgentTurnID: "t-op"})
	if err != nil || outO.Result.Status != card.StatusSuccess {
		t.Fatalf("operator's call: %+v, %v", outO, err)
	}
	if err := opc.Flush(ctx); err != nil { // its lazy ack is answered
		t.Fatal(err)
	}
	if e, err := m.Inbox().Get(ctx, "demo", outO.Wakeup.InboxID); err != nil || e.State != inbox.StateAcked || e.AgentID != "op-operator" {
		t.Fatalf("operator's entry = %+v, %v; want acked, agent op-operator", e, err)
	}
	select {
	case err := <-op.errs:
		t.Fatalf("the operator's call hit a permission violation: %v", err)
	default:
	}
}

// waitEntry waits until the inbox holds agent's entry of call and returns
// its inbox id.
func waitEntry(ctx context.Context, t *testing.T, m *mesh.Mesh, agentID, call string) string {
	t.Helper()
	for {
		es, err := m.Inbox().List(ctx, "demo", inbox.ListQuery{AgentID: agentID, State: inbox.StateAll})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.ToolCallID == call {
				return e.InboxID
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no inbox entry of %s's call %s", agentID, call)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
