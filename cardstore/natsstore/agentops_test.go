package natsstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestAgentScopedOps: on its own subjects (NewAgentClient) an agent reads
// and writes its own cards, turns and boxes; every card, turn or box of
// another agent of the same project is refused (forbidden, audited with
// the agent as actor), as is a card that names another agent or goes
// into another agent's turn. Against the file store and the replicated
// store (the turn's agent is read from each store's turn listing).
func TestAgentScopedOps(t *testing.T) {
	for _, mode := range []string{modeBolt, modeJS} {
		t.Run(mode, func(t *testing.T) { testAgentScopedOps(t, mode) })
	}
}

// agentCard is a note of agent in turn (no turn: "").
func agentCard(agent, turn string) *card.Card {
	c := storetest.NoteCard("p", turn, "note of "+agent)
	c.Metadata.AgentID = agent
	return c
}

func testAgentScopedOps(t *testing.T, mode string) {
	ctx := context.Background()
	m := serveTools(t, mode)
	// Written by the core: alice's and bob's calls, each with its result
	// (which names no agent: the turn's agent owns it), a card of bob's
	// with no turn, and a box of bob's.
	aCall, bCall := callCard("p", "t-alice", "c1", "echo"), callCard("p", "t-bob", "c1", "echo")
	aCall.Metadata.AgentID, bCall.Metadata.AgentID = "alice", "bob"
	aRes, bRes := resultCard("p", "t-alice", "c1", "echo"), resultCard("p", "t-bob", "c1", "echo")
	bLoose := agentCard("bob", "")
	// The admission put alice's call into bob's turn (a confirmation):
	// it and its result name her, and are hers to read; the turn is not.
	aInBob := callCard("p", "t-bob", "c2", "echo")
	aInBob.Metadata.AgentID = "alice"
	aInBobRes := resultCard("p", "t-bob", "c2", "echo")
	aInBobRes.Metadata.AgentID = "alice"
	if err := m.store.Put(ctx, aCall, aRes, bCall, bRes, bLoose, aInBob, aInBobRes); err != nil {
		t.Fatal(err)
	}
	bBox, err := m.store.CreateBox(ctx, "p", "", []string{bCall.CardID, bRes.CardID})
	if err != nil {
		t.Fatal(err)
	}

	alice, err := natsstore.NewAgentClient(m.nc, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if alice.Agent() != "alice" {
		t.Fatalf("Agent() = %q", alice.Agent())
	}
	// Her own: every read and write works.
	if c, err := alice.Get(ctx, "p", aRes.CardID); err != nil || c.CardID != aRes.CardID {
		t.Fatalf("get her result: %v, %v", c, err)
	}
	if res, err := alice.GetMany(ctx, "p", []string{aInBob.CardID, aInBobRes.CardID}); err != nil || len(res.Cards) != 2 {
		t.Fatalf("get her call and result in bob's turn: %+v, %v", res, err)
	}
	if page, err := alice.ListTurn(ctx, cardstore.ListTurnRequest{ProjectID: "p", AgentTurnID: "t-alice"}); err != nil || len(page.Cards) != 2 {
		t.Fatalf("list her turn: %+v, %v", page, err)
	}
	if page, err := alice.ListTurn(ctx, cardstore.ListTurnRequest{ProjectID: "p", AgentTurnID: "t-new"}); err != nil || len(page.Cards) != 0 {
		t.Fatalf("list a turn with no card: %+v, %v", page, err)
	}
	if c, err := alice.FindToolResult(ctx, "p", "t-alice", "c1"); err != nil || c.CardID != aRes.CardID {
		t.Fatalf("find her result: %v, %v", c, err)
	}
	if _, err := alice.FindToolResult(ctx, "p", "t-new", "c1"); !errors.Is(err, cardstore.ErrNotFound) {
		t.Fatalf("find a result in a turn with no card = %v, want not found", err)
	}
	mine := agentCard("alice", "t-alice")
	fresh := agentCard("alice", "t-new")
	loose := agentCard("alice", "")
	if err := alice.Put(ctx, mine, fresh, loose); err != nil {
		t.Fatalf("put her cards (her turn, a new turn, no turn): %v", err)
	}
	if res, err := alice.GetMany(ctx, "p", []string{aCall.CardID, fresh.CardID, loose.CardID, card.NewID()}); err != nil || len(res.Cards) != 3 || len(res.Missing) != 1 {
		t.Fatalf("get_many of hers: %+v, %v", res, err)
	}
	turns, err := alice.ListTurns(ctx, cardstore.ListTurnsRequest{ProjectID: "p"})
	if err != nil || len(turns.Turns) != 2 {
		t.Fatalf("list_turns = %+v, %v; want her two turns", turns, err)
	}
	for _, ti := range turns.Turns {
		if ti.AgentID != "alice" {
			t.Fatalf("list_turns lists %+v", ti)
		}
	}
	box, err := alice.CreateBox(ctx, "p", "", []string{aCall.CardID})
	if err != nil {
		t.Fatalf("box_create of hers: %v", err)
	}
	if _, err := alice.AppendBox(ctx, "p", box.BoxID, []string{loose.CardID}); err != nil {
		t.Fatalf("box_append of hers: %v", err)
	}
	if b, err := alice.GetBox(ctx, "p", box.BoxID); err != nil || len(b.CardIDs) != 2 {
		t.Fatalf("box_get of hers: %+v, %v", b, err)
	}

	// Bob's: each refused, named and audited.
	intoBob := agentCard("alice", "t-bob")
	asBob := agentCard("bob", "t-new2")
	forged := resultCard("p", "t-alice", "c9", "echo")
	forged.Metadata.AgentID = "alice"
	refusals := []struct {
		name, op, want string
		do             func() error
	}{
		{"get bob's card", natsstore.OpGet, bCall.CardID, func() error { _, err := alice.Get(ctx, "p", bCall.CardID); return err }},
		{"get bob's result", natsstore.OpGet, bRes.CardID, func() error { _, err := alice.Get(ctx, "p", bRes.CardID); return err }},
		{"get bob's card of no turn", natsstore.OpGet, bLoose.CardID, func() error { _, err := alice.Get(ctx, "p", bLoose.CardID); return err }},
		{"get_many with bob's card", natsstore.OpGetMany, bCall.CardID, func() error {
			_, err := alice.GetMany(ctx, "p", []string{aCall.CardID, bCall.CardID})
			return err
		}},
		{"list bob's turn", natsstore.OpListTurn, "t-bob", func() error {
			_, err := alice.ListTurn(ctx, cardstore.ListTurnRequest{ProjectID: "p", AgentTurnID: "t-bob"})
			return err
		}},
		{"find bob's result", natsstore.OpFindResult, "t-bob", func() error { _, err := alice.FindToolResult(ctx, "p", "t-bob", "c1"); return err }},
		{"list bob's turns", natsstore.OpListTurns, "bob", func() error {
			_, err := alice.ListTurns(ctx, cardstore.ListTurnsRequest{ProjectID: "p", AgentID: "bob"})
			return err
		}},
		{"put a card into bob's turn", natsstore.OpPut, "t-bob", func() error { return alice.Put(ctx, intoBob) }},
		{"put a card as bob", natsstore.OpPut, `"bob"`, func() error { return alice.Put(ctx, asBob) }},
		{"box_get bob's box", natsstore.OpBoxGet, bBox.BoxID, func() error { _, err := alice.GetBox(ctx, "p", bBox.BoxID); return err }},
		{"box_append to bob's box", natsstore.OpBoxAppend, bBox.BoxID, func() error {
			_, err := alice.AppendBox(ctx, "p", bBox.BoxID, []string{aCall.CardID})
			return err
		}},
		{"box_create with bob's card", natsstore.OpBoxCreate, bCall.CardID, func() error {
			_, err := alice.CreateBox(ctx, "p", "", []string{aCall.CardID, bCall.CardID})
			return err
		}},
		{"box_append bob's card to her box", natsstore.OpBoxAppend, bRes.CardID, func() error {
			_, err := alice.AppendBox(ctx, "p", box.BoxID, []string{bRes.CardID})
			return err
		}},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if !errors.Is(err, cardstore.ErrForbidden) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "alice") {
				t.Fatalf("%s = %v; want forbidden naming %s and alice", tc.name, err, tc.want)
			}
			if r := m.waitAudit(t, tc.op, tc.want); r.Actor != "agent:alice" {
				t.Fatalf("audit actor = %q, want agent:alice", r.Actor)
			}
		})
	}
	for _, c := range []*card.Card{intoBob, asBob} {
		if _, err := m.store.Get(ctx, "p", c.CardID); !errors.Is(err, cardstore.ErrNotFound) {
			t.Fatalf("refused card %s was stored: %v", c.CardID, err)
		}
	}
	if b, _ := m.store.GetBox(ctx, "p", bBox.BoxID); len(b.CardIDs) != 2 {
		t.Fatalf("bob's box changed: %+v", b)
	}
	// A result on the agent's put is refused as on the plain put.
	subj, _ := subjects.AgentService(subjects.DefaultVersion, "p", "default", natsstore.ServiceName, natsstore.OpPut, "alice")
	err = svc.Call(ctx, m.nc, subj.String(), natsstore.Codes, map[string]any{"cards": []*card.Card{forged}}, &json.RawMessage{})
	if !errors.Is(err, natsstore.ErrWrongOp) {
		t.Fatalf("a tool.result on put.alice = %v, want wrong_op", err)
	}
}

// BenchmarkAgentGet is an agent's read of its call's result over NATS, on
// bbolt: plain on the project's get; agent on get.<agent> with a result
// naming the agent (the SDK's case: no turn lookup); agent-turn with a
// result that names no agent, so the server reads the turn's first cards
// to find its agent.
//
//	go test -run '^$' -bench BenchmarkAgentGet -benchtime 2000x ./cardstore/natsstore/
func BenchmarkAgentGet(b *testing.B) {
	for _, mode := range []string{"plain", "agent", "agent-turn"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			m := serveTools(b, modeBolt)
			call, res := callCard("p", "t1", "c1", "echo"), resultCard("p", "t1", "c1", "echo")
			call.Metadata.AgentID = "alice"
			if mode != "agent-turn" {
				res.Metadata.AgentID = "alice"
			}
			if err := m.store.Put(ctx, call, res); err != nil {
				b.Fatal(err)
			}
			st := cardstore.Store(m.client)
			if mode != "plain" {
				c, err := natsstore.NewAgentClient(m.nc, "alice")
				if err != nil {
					b.Fatal(err)
				}
				st = c
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := st.Get(ctx, "p", res.CardID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
