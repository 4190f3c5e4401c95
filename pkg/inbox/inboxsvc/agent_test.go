package inboxsvc

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/internal/audit"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/natsinbox"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestAgentScopedInbox: on its own subjects (natsinbox.NewAgentClient) an
// agent lists, gets, acks and sets the epoch of its own entries and
// turns; another agent's entries and turns are refused (forbidden,
// audited with the agent as actor) and stay as they were.
func TestAgentScopedInbox(t *testing.T) {
	e := newEnv(t, 4)
	ctx := context.Background()
	audits := make(chan audit.Record, 16)
	ap, _ := subjects.AuditPattern(ver)
	if _, err := e.nc.Subscribe(ap, func(m *nats.Msg) {
		var r audit.Record
		if json.Unmarshal(m.Data, &r) == nil {
			audits <- r
		}
	}); err != nil {
		t.Fatal(err)
	}
	mine, theirs := e.putResult("p", "alice", "t-alice", "k", 0), e.putResult("p", "bob", "t-bob", "k", 0)
	e.publish("p", mine.report(), "")
	e.publish("p", theirs.report(), "")
	e.settle()
	all := e.list("p", inbox.ListQuery{AgentID: "alice"})
	bobs := e.list("p", inbox.ListQuery{AgentID: "bob"})
	if len(all) != 1 || len(bobs) != 1 {
		t.Fatalf("entries: alice %d, bob %d; want 1 each", len(all), len(bobs))
	}
	aID, bID := all[0].InboxID, bobs[0].InboxID

	alice, err := natsinbox.NewAgentClient(e.nc, "alice", svc.WithChannel("c1"))
	must(t, err)
	if es, err := alice.List(ctx, "p", inbox.ListQuery{}); err != nil || len(es) != 1 || es[0].InboxID != aID {
		t.Fatalf("list with no agent_id = %+v, %v; want her entry", es, err)
	}
	if got, err := alice.Get(ctx, "p", aID); err != nil || got.AgentID != "alice" {
		t.Fatalf("get her entry = %+v, %v", got, err)
	}
	if n, err := alice.SetEpoch(ctx, "p", "t-new", 2); err != nil || n != 2 {
		t.Fatalf("set_epoch of a turn with no card = %d, %v", n, err)
	}
	if n, err := alice.Ack(ctx, "p", aID); err != nil || n != 1 {
		t.Fatalf("ack her entry = %d, %v", n, err)
	}
	if _, err := alice.SetEpoch(ctx, "p", "t-alice", 1); err != nil {
		t.Fatalf("set_epoch of her turn: %v", err)
	}

	for _, tc := range []struct {
		name, op, want string
		do             func() error
	}{
		{"list bob's entries", inbox.OpList, `"bob"`, func() error { _, err := alice.List(ctx, "p", inbox.ListQuery{AgentID: "bob"}); return err }},
		{"get bob's entry", inbox.OpGet, bID, func() error { _, err := alice.Get(ctx, "p", bID); return err }},
		{"ack bob's entry", inbox.OpAck, bID, func() error { _, err := alice.Ack(ctx, "p", bID); return err }},
		{"ack bob's entry lazily", inbox.OpAck, bID, func() error { _, err := alice.AckLazy(ctx, "p", bID); return err }},
		{"set the epoch of bob's turn", inbox.OpSetEpoch, "t-bob", func() error { _, err := alice.SetEpoch(ctx, "p", "t-bob", 5); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if !errors.Is(err, inbox.ErrForbidden) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s = %v; want forbidden naming %s", tc.name, err, tc.want)
			}
			deadline := time.After(10 * time.Second)
			for {
				select {
				case r := <-audits:
					if r.Op == tc.op && !r.Allowed && r.Actor == "agent:alice" && strings.Contains(r.Reason, tc.want) {
						return
					}
				case <-deadline:
					t.Fatalf("no audit record of the refused %s", tc.op)
				}
			}
		})
	}
	// Bob's entry is still pending, in its epoch.
	if got, err := e.client.Get(ctx, "p", bID); err != nil || got.State != inbox.StatePending {
		t.Fatalf("bob's entry after the refusals = %+v, %v; want pending", got, err)
	}
	// An unknown id is not_found, as on the plain ack.
	if _, err := alice.Ack(ctx, "p", "01929a6e-0000-7000-8000-000000000000"); !errors.Is(err, inbox.ErrNotFound) {
		t.Fatalf("ack of an unknown id = %v, want not found", err)
	}
}
