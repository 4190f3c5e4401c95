package meshauth_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/streams"
)

func newKey(t *testing.T) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return pub
}

// TestPermissionsShape: the rules every non-core identity's permissions
// follow (the real-server table is cmd/utpmesh TestIdentityEscalations):
// its own inbox prefix only, no stream management, raw commands only with
// the opt-in, a limited worker's subjects in its projects only.
func TestPermissionsShape(t *testing.T) {
	tool := []meshauth.Tool{{Name: "echo", Target: "echo"}}
	ids := []struct {
		name string
		id   meshauth.Identity
	}{
		{"agent", meshauth.Identity{Role: meshauth.RoleAgent, Project: "demo"}},
		{"agent raw", meshauth.Identity{Role: meshauth.RoleAgent, Project: "demo", RawCommands: true}},
		{"agent alice", meshauth.Identity{Role: meshauth.RoleAgent, Project: "demo", Agent: "alice"}},
		{"worker", meshauth.Identity{Role: meshauth.RoleWorker, Service: "echo", Tools: tool}},
		{"worker limited", meshauth.Identity{Role: meshauth.RoleWorker, Service: "echo", Tools: tool, Projects: []string{"demo"}}},
		{"operator", meshauth.Identity{Role: meshauth.RoleOperator}},
	}
	for _, tc := range ids {
		t.Run(tc.name, func(t *testing.T) {
			tc.id.Key = newKey(t)
			p := meshauth.Permissions("v1", tc.id)
			if p == nil {
				t.Fatal("nil permissions: everything")
			}
			pub, sub := p.Publish.Allow, p.Subscribe.Allow
			if !slices.Contains(sub, creds.InboxPrefix(tc.id.Key)+".>") {
				t.Errorf("subscribe %v lacks its inbox prefix", sub)
			}
			for _, s := range sub {
				if strings.HasPrefix(s, "_INBOX.") && s != creds.InboxPrefix(tc.id.Key)+".>" {
					t.Errorf("subscribe %q: another inbox", s)
				}
			}
			raw := false
			for _, s := range pub {
				for _, op := range []string{"STREAM.CREATE", "STREAM.UPDATE", "STREAM.DELETE", "STREAM.PURGE", "STREAM.MSG.DELETE", "CONSUMER.DELETE"} {
					if strings.Contains(s, "$JS.API."+op) {
						t.Errorf("publish %q manages a stream", s)
					}
				}
				if strings.Contains(s, ".cmd.tool.") && !strings.HasPrefix(s, "$JS.API.CONSUMER.CREATE.") {
					raw = true
				}
				if tc.id.Projects != nil && strings.HasPrefix(s, "cg.v1.*.") && !strings.Contains(s, ".svc.cardstore.claim_key.") &&
					!strings.Contains(s, ".svc.cardstore.release_key.") && !strings.Contains(s, ".svc.cardstore.get_claim.") {
					t.Errorf("publish %q: a limited worker outside its projects", s)
				}
				if tc.id.Projects != nil && strings.HasPrefix(s, "$JS.API.CONSUMER.CREATE.") {
					t.Errorf("publish %q: a limited worker creates its durable", s)
				}
			}
			if raw != tc.id.RawCommands {
				t.Errorf("raw commands allowed = %v, want %v (%v)", raw, tc.id.RawCommands, pub)
			}
			if tc.id.Role == meshauth.RoleOperator {
				// Its own calls' wakeups only; never an agent's dispatch, an
				// inbox ack or another agent's wakeups.
				if !slices.Equal(sub, []string{creds.InboxPrefix(tc.id.Key) + ".>", "cg.v1.*.*.cmd.agent.op-operator.wakeup"}) {
					t.Errorf("operator subscribe %v", sub)
				}
				for _, s := range pub {
					if strings.Contains(s, ".svc.dispatch.call.") || strings.HasSuffix(s, ".svc.inbox.ack") || strings.Contains(s, ".cmd.") {
						t.Errorf("operator publish %q", s)
					}
				}
			}
			if tc.id.Agent != "" && (!slices.Contains(pub, "cg.v1.demo.*.svc.dispatch.call.alice") || slices.Contains(sub, "cg.v1.demo.*.cmd.agent.*.wakeup")) {
				t.Errorf("per-agent identity: publish %v, subscribe %v", pub, sub)
			}
		})
	}
	if p := meshauth.Permissions("v1", meshauth.Identity{Role: meshauth.RoleAdmin}); p != nil {
		t.Errorf("admin permissions = %+v, want nil (everything)", p)
	}
}

func TestWorkerDurables(t *testing.T) {
	id := meshauth.Identity{Role: meshauth.RoleWorker, Service: "x", Tools: []meshauth.Tool{{Name: "x.y", Target: "x.y"}}, Projects: []string{"a", "b"}}
	got := meshauth.WorkerDurables("v1", id)
	want := []string{"cg.v1.a.*.cmd.tool.x.y", "cg.v1.b.*.cmd.tool.x.y"}
	if d := streams.ToolConsumer("x.y"); len(got) != 1 || !slices.Equal(got[d], want) {
		t.Fatalf("WorkerDurables = %v, want %s: %v", got, d, want)
	}
	id.Projects = nil
	if got := meshauth.WorkerDurables("v1", id); !slices.Equal(got[streams.ToolConsumer("x.y")], []string{"cg.v1.*.*.cmd.tool.x.y"}) {
		t.Fatalf("WorkerDurables of an unlimited worker = %v", got)
	}
	if got := meshauth.WorkerDurables("v1", meshauth.Identity{Role: meshauth.RoleAgent, Project: "a"}); got != nil {
		t.Fatalf("WorkerDurables of an agent = %v, want nil", got)
	}
}

// TestAgentScopedPermissions: a per-agent identity publishes only its own
// agent's CardStore and inbox subjects, never the project's plain ones
// (which serve every agent's cards and entries) nor another agent's; a
// project-wide one keeps the plain subjects and every agent's scoped ones;
// the operator acks only its own agent id's inbox entries. The op lists
// are the services' own.
func TestAgentScopedPermissions(t *testing.T) {
	if !slices.Equal(meshauth.AgentCardOps, natsstore.AgentOps) || !slices.Equal(meshauth.AgentInboxOps, inbox.AgentOps) {
		t.Fatalf("agent-scoped ops: meshauth %v / %v, services %v / %v", meshauth.AgentCardOps, meshauth.AgentInboxOps, natsstore.AgentOps, inbox.AgentOps)
	}
	pub := func(id meshauth.Identity) []string {
		id.Key = newKey(t)
		return meshauth.Permissions("v1", id).Publish.Allow
	}
	alice := pub(meshauth.Identity{Role: meshauth.RoleAgent, Project: "demo", Agent: "alice"})
	wide := pub(meshauth.Identity{Role: meshauth.RoleAgent, Project: "demo"})
	op := pub(meshauth.Identity{Role: meshauth.RoleOperator})
	for _, s := range alice {
		for _, svc := range []string{".svc.cardstore.", ".svc.inbox."} {
			if strings.Contains(s, svc) && !strings.HasSuffix(s, ".alice") {
				t.Errorf("per-agent identity publishes %q: not its own agent's", s)
			}
		}
	}
	for _, tc := range []struct {
		name string
		pub  []string
		want []string
	}{
		{"per-agent", alice, []string{"cg.v1.demo.*.svc.inbox.ack.alice", "cg.v1.demo.*.svc.inbox.set_epoch.alice", "cg.v1.demo.*.svc.cardstore.get.alice",
			"cg.v1.demo.*.svc.cardstore.put.alice", "cg.v1.demo.*.svc.cardstore.box_get.alice", "cg.v1.demo.*.svc.cardstore.list_turns.alice"}},
		{"project-wide", wide, []string{"cg.v1.demo.*.svc.inbox.ack", "cg.v1.demo.*.svc.inbox.ack.*", "cg.v1.demo.*.svc.cardstore.get", "cg.v1.demo.*.svc.cardstore.get.*"}},
		{"operator", op, []string{"cg.v1.*.*.svc.inbox.ack.op-operator", "cg.v1.*.*.svc.inbox.list.op-operator", "cg.v1.*.*.svc.cardstore.get.op-operator"}},
	} {
		for _, w := range tc.want {
			if !slices.Contains(tc.pub, w) {
				t.Errorf("%s identity lacks %q", tc.name, w)
			}
		}
	}
	for _, s := range op {
		if strings.Contains(s, ".svc.inbox.ack") && s != "cg.v1.*.*.svc.inbox.ack.op-operator" {
			t.Errorf("operator publishes %q", s)
		}
		if strings.Contains(s, ".svc.cardstore.put") || strings.Contains(s, ".svc.inbox.set_epoch") {
			t.Errorf("operator publishes %q", s)
		}
	}
}

// TestAgentDurables: each agent identity has one wakeup durable with its
// own filter, and its permissions reach that durable's info, fetch and
// acknowledgements only: never a consumer create, update or delete, nor
// another agent's or project's durable.
func TestAgentDurables(t *testing.T) {
	wake := streams.WakeupStream("v1")
	for _, tc := range []struct {
		name    string
		id      meshauth.Identity
		durable string
		filter  string
		others  []string // durables it may not touch
	}{
		{"per-agent", meshauth.Identity{Role: meshauth.RoleAgent, Project: "demo", Agent: "alice"},
			streams.AgentWakeupConsumer("demo", "alice"), "cg.v1.demo.*.cmd.agent.alice.wakeup",
			[]string{streams.AgentWakeupConsumer("demo", "bob"), streams.AgentWakeupConsumer("demo", ""), streams.AgentWakeupConsumer("other", "alice")}},
		{"project-wide", meshauth.Identity{Role: meshauth.RoleAgent, Project: "demo"},
			streams.AgentWakeupConsumer("demo", ""), "cg.v1.demo.*.cmd.agent.*.wakeup",
			[]string{streams.AgentWakeupConsumer("demo", "alice"), streams.AgentWakeupConsumer("other", "")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := meshauth.AgentDurables("v1", tc.id)
			if len(got) != 1 || !slices.Equal(got[tc.durable], []string{tc.filter}) {
				t.Fatalf("AgentDurables = %v, want %s: %s", got, tc.durable, tc.filter)
			}
			tc.id.Key = newKey(t)
			pub := meshauth.Permissions("v1", tc.id).Publish.Allow
			for _, w := range []string{"$JS.API.CONSUMER.INFO." + wake + "." + tc.durable, "$JS.API.CONSUMER.MSG.NEXT." + wake + "." + tc.durable,
				"$JS.ACK." + wake + "." + tc.durable + ".>"} {
				if !slices.Contains(pub, w) {
					t.Errorf("publish lacks %q", w)
				}
			}
			for _, s := range pub {
				if strings.Contains(s, "CONSUMER.CREATE") || strings.Contains(s, "CONSUMER.DURABLE") || strings.Contains(s, "CONSUMER.DELETE") {
					t.Errorf("publish %q: an agent makes or removes consumers", s)
				}
				for _, o := range tc.others {
					if strings.Contains(s, o) {
						t.Errorf("publish %q: another identity's durable", s)
					}
				}
			}
		})
	}
	if got := meshauth.AgentDurables("v1", meshauth.Identity{Role: meshauth.RoleWorker, Service: "x", Tools: []meshauth.Tool{{Name: "x", Target: "x"}}}); got != nil {
		t.Fatalf("AgentDurables of a worker = %v, want nil", got)
	}
}
