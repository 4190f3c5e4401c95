package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/identity"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
	"github.com/utpmesh/utpmesh/subjects"
)

// logBuffer is a concurrency-safe buffer for a mesh's log.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// allowed publishes subj (which a must be allowed), then a subject it
// surely may not (sentinel) and waits for that one's violation: the
// server handles a connection's messages in order, so no violation for
// subj came before.
func (a *actor) allowed(t *testing.T, subj string) {
	t.Helper()
	const sentinel = "$JS.API.STREAM.DELETE.sentinel"
	if err := a.nc.Publish(subj, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := a.nc.Publish(sentinel, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-a.errs:
			if strings.Contains(err.Error(), subj) {
				t.Fatalf("%s was refused: %v", subj, err)
			}
			if strings.Contains(err.Error(), sentinel) {
				return
			}
		case <-deadline:
			t.Fatalf("no violation for the sentinel after %s", subj)
		}
	}
}

// TestIdentityEscalations: the role × action table of issue 23, run from
// real connections holding each identity of a mesh with NATS
// authentication: every escalation is refused by the server (and logged
// by the mesh), a lease of another service is refused by the CardStore
// and audited; the legitimate neighbours of each refused action work.
func TestIdentityEscalations(t *testing.T) {
	ctx := context.Background()
	logs := &logBuffer{}
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})), Auth: &mesh.AuthConfig{},
		Projects: []string{"demo", "other"},
		Identities: &mesh.IdentityConfig{
			Workers: []meshauth.Identity{
				{Role: meshauth.RoleWorker, Service: "echo", Tools: []meshauth.Tool{{Name: "echo", Target: "echo"}}},
				{Role: meshauth.RoleWorker, Service: "lim", Tools: []meshauth.Tool{{Name: "lim", Target: "lim"}}, Projects: []string{"demo"}},
				{Role: meshauth.RoleAgent, Project: "demo", Agent: "alice"},
			},
			// demo dispatches through the mesh; other opted in to raw
			// commands.
			RawCommands: func(p string) bool { return p == "other" },
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	url := m.ClientURL()
	as := func(name string) *actor {
		a, err := connectAs(t, url, m.CredsFile(name))
		if err != nil {
			t.Fatalf("connect as %s: %v", name, err)
		}
		return a
	}
	admin, op, agentDemo, agentOther, alice := as("admin"), as("operator"), as("agent-demo"), as("agent-other"), as("agent-demo.alice")
	wk, lim := as("worker-echo"), as("worker-lim")
	agentPub, err := creds.PublicKey(m.CredsFile("agent-demo"))
	if err != nil {
		t.Fatal(err)
	}

	v := subjects.DefaultVersion
	cmd, wake, evt := "cg_cmd_"+v, "cg_wake_"+v, "cg_evt_"+v
	p := func(project, rest string) string { return "cg." + v + "." + project + ".default." + rest }
	otherLease := p("demo", "svc.cardstore.claim_key."+subjects.ToolToken("atlas.tasks"))
	stateEvt := func(project, service string) string {
		s, err := subjects.StateEvent(v, project, service, "booking-1")
		if err != nil {
			t.Fatal(err)
		}
		return s.String()
	}
	aliceWake, bobWake := streams.AgentWakeupConsumer("demo", "alice"), streams.AgentWakeupConsumer("demo", "bob")
	demoWake, otherWake := streams.AgentWakeupConsumer("demo", ""), streams.AgentWakeupConsumer("other", "")
	deny := []struct {
		actor  string
		a      *actor
		action string
		kind   string // publish or subscription
		subj   string
	}{
		{"worker", wk, "create a stream", "publish", "$JS.API.STREAM.CREATE.evil"},
		{"worker", wk, "update the wakeup stream", "publish", "$JS.API.STREAM.UPDATE." + wake},
		{"worker", wk, "update the command stream", "publish", "$JS.API.STREAM.UPDATE." + cmd},
		{"worker", wk, "delete the event stream", "publish", "$JS.API.STREAM.DELETE." + evt},
		{"worker", wk, "purge the audit records", "publish", "$JS.API.STREAM.PURGE." + evt},
		{"worker", wk, "delete a command", "publish", "$JS.API.STREAM.MSG.DELETE." + cmd},
		{"worker", wk, "update another service's bucket", "publish", "$JS.API.STREAM.UPDATE.KV_utpmesh_atp_ratelimit"},
		{"worker", wk, "delete another tool's durable", "publish", "$JS.API.CONSUMER.DELETE." + cmd + ".utp_tool_atlas_task_list"},
		{"worker", wk, "read every reply inbox", "subscription", "_INBOX.>"},
		{"worker", wk, "read an agent's reply inbox", "subscription", creds.InboxPrefix(agentPub) + ".>"},
		{"worker", wk, "+TERM another tool's delivery", "publish", "$JS.ACK." + cmd + ".utp_tool_atlas_task_list.1.7.7.1700000000000000000.0"},
		{"worker", wk, "take another service's lease", "publish", otherLease},
		{"worker", wk, "take a lease on the core's claim_key", "publish", p("demo", "svc.cardstore.claim_key")},
		{"worker", wk, "read claims on the plain get_claim", "publish", p("demo", "svc.cardstore.get_claim")},
		{"worker", wk, "publish a wakeup", "publish", p("demo", "cmd.agent.victim.wakeup")},
		{"worker", wk, "publish on the operator's dispatch", "publish", p("demo", "svc.dispatch.operator.operator")},
		{"worker limited to demo", lim, "read project other's cards", "publish", p("other", "svc.cardstore.get")},
		{"worker limited to demo", lim, "report in project other", "publish", p("other", "svc.inbox.report")},
		{"worker limited to demo", lim, "claim a call of project other", "publish", p("other", "svc.cardstore.claim.lim")},
		{"worker limited to demo", lim, "create its durable on project other", "publish", "$JS.API.CONSUMER.CREATE." + cmd + ".utp_tool_lim.cg." + v + ".other.*.cmd.tool.lim"},
		{"worker limited to demo", lim, "create its durable on every project", "publish", "$JS.API.CONSUMER.CREATE." + cmd + ".utp_tool_lim.cg." + v + ".*.*.cmd.tool.lim"},
		{"worker limited to demo", lim, "read project other's registry", "publish", p("other", "svc.registry.get")},
		{"worker limited to demo", lim, "register its tool in project other", "publish", p("other", "svc.registry.put.lim")},
		{"agent (project without raw commands)", agentDemo, "publish a raw tool command", "publish", p("demo", "cmd.tool.echo")},
		{"agent (project without raw commands)", agentDemo, "publish a raw PMO command", "publish", p("demo", "cmd.sys.pmo.internal.list_tools")},
		{"agent", agentDemo, "forge a wakeup", "publish", p("demo", "cmd.agent.victim.wakeup")},
		{"agent", agentDemo, "update a stream", "publish", "$JS.API.STREAM.UPDATE." + wake},
		{"agent", agentDemo, "read every reply inbox", "subscription", "_INBOX.>"},
		{"agent", agentDemo, "dispatch as the operator", "publish", p("demo", "svc.dispatch.operator.operator")},
		{"agent", agentDemo, "add an identity", "publish", p("_mesh", "svc.identity.add")},
		{"agent", agentDemo, "take a service's lease", "publish", otherLease},
		{"agent (raw commands)", agentOther, "publish a raw command in project demo", "publish", p("demo", "cmd.tool.echo")},
		// Wakeup durables: the core made each agent identity's; a
		// consumer's filter is in the create request's body, so no agent
		// may create one, and each binds its own only.
		{"agent demo/alice", alice, "create a consumer on the wakeup stream", "publish", "$JS.API.CONSUMER.CREATE." + wake + ".mine"},
		{"agent demo/alice", alice, "create a consumer filtered on another agent's wakeups", "publish", "$JS.API.CONSUMER.CREATE." + wake + ".mine.cg." + v + ".demo.*.cmd.agent.bob.wakeup"},
		{"agent demo/alice", alice, "update its own wakeup durable", "publish", "$JS.API.CONSUMER.CREATE." + wake + "." + aliceWake + ".cg." + v + ".demo.*.cmd.agent.alice.wakeup"},
		{"agent demo/alice", alice, "create a durable the old way", "publish", "$JS.API.CONSUMER.DURABLE.CREATE." + wake + ".mine"},
		{"agent demo/alice", alice, "create an ephemeral consumer", "publish", "$JS.API.CONSUMER.CREATE." + wake},
		{"agent demo/alice", alice, "delete its own wakeup durable", "publish", "$JS.API.CONSUMER.DELETE." + wake + "." + aliceWake},
		{"agent demo/alice", alice, "bind bob's wakeup durable", "publish", "$JS.API.CONSUMER.INFO." + wake + "." + bobWake},
		{"agent demo/alice", alice, "fetch from bob's wakeup durable", "publish", "$JS.API.CONSUMER.MSG.NEXT." + wake + "." + bobWake},
		{"agent demo/alice", alice, "ack a delivery of bob's wakeup durable", "publish", "$JS.ACK." + wake + "." + bobWake + ".1.7.7.1700000000000000000.0"},
		{"agent demo/alice", alice, "fetch from the project's wakeup durable", "publish", "$JS.API.CONSUMER.MSG.NEXT." + wake + "." + demoWake},
		{"agent demo/alice", alice, "fetch from another project's durable of its name", "publish", "$JS.API.CONSUMER.MSG.NEXT." + wake + "." + streams.AgentWakeupConsumer("other", "alice")},
		{"agent", agentDemo, "create a consumer on the wakeup stream", "publish", "$JS.API.CONSUMER.CREATE." + wake + ".mine.cg." + v + ".other.*.cmd.agent.*.wakeup"},
		{"agent", agentDemo, "fetch from project other's wakeup durable", "publish", "$JS.API.CONSUMER.MSG.NEXT." + wake + "." + otherWake},
		{"agent", agentDemo, "ack a delivery of project other's wakeup durable", "publish", "$JS.ACK." + wake + "." + otherWake + ".1.7.7.1700000000000000000.0"},
		{"agent", agentDemo, "fetch from alice's wakeup durable", "publish", "$JS.API.CONSUMER.MSG.NEXT." + wake + "." + aliceWake},
		{"agent", agentDemo, "list the wakeup stream's consumers", "publish", "$JS.API.CONSUMER.LIST." + wake},
		{"worker", wk, "fetch an agent's wakeups from its durable", "publish", "$JS.API.CONSUMER.MSG.NEXT." + wake + "." + aliceWake},
		{"operator", op, "fetch an agent's wakeups from its durable", "publish", "$JS.API.CONSUMER.MSG.NEXT." + wake + "." + demoWake},
		{"agent demo/alice", alice, "dispatch as another agent", "publish", p("demo", "svc.dispatch.call.bob")},
		{"agent demo/alice", alice, "receive another agent's wakeups", "subscription", "cg." + v + ".demo.*.cmd.agent.bob.wakeup"},
		{"agent demo/alice", alice, "receive every agent's wakeups", "subscription", "cg." + v + ".demo.*.cmd.agent.*.wakeup"},
		// The project's plain CardStore and inbox subjects serve every
		// agent's cards and entries; another agent's scoped ones are its.
		{"agent demo/alice", alice, "list the project's inbox", "publish", p("demo", "svc.inbox.list")},
		{"agent demo/alice", alice, "get from the project's inbox", "publish", p("demo", "svc.inbox.get")},
		{"agent demo/alice", alice, "ack on the project's inbox", "publish", p("demo", "svc.inbox.ack")},
		{"agent demo/alice", alice, "set an epoch on the project's inbox", "publish", p("demo", "svc.inbox.set_epoch")},
		{"agent demo/alice", alice, "ack on bob's inbox subject", "publish", p("demo", "svc.inbox.ack.bob")},
		{"agent demo/alice", alice, "list bob's inbox subject", "publish", p("demo", "svc.inbox.list.bob")},
		{"agent demo/alice", alice, "read the project's cards", "publish", p("demo", "svc.cardstore.get")},
		{"agent demo/alice", alice, "list the project's turns", "publish", p("demo", "svc.cardstore.list_turns")},
		{"agent demo/alice", alice, "list a turn on the project's subject", "publish", p("demo", "svc.cardstore.list_turn")},
		{"agent demo/alice", alice, "put on the project's subject", "publish", p("demo", "svc.cardstore.put")},
		{"agent demo/alice", alice, "get a box on the project's subject", "publish", p("demo", "svc.cardstore.box_get")},
		{"agent demo/alice", alice, "read claims", "publish", p("demo", "svc.cardstore.get_claim")},
		{"agent demo/alice", alice, "read cards on bob's subject", "publish", p("demo", "svc.cardstore.get.bob")},
		{"agent demo/alice", alice, "put cards on bob's subject", "publish", p("demo", "svc.cardstore.put.bob")},
		{"agent demo/alice", alice, "read another project's cards on its own subject", "publish", p("other", "svc.cardstore.get.alice")},
		{"operator", op, "update a stream", "publish", "$JS.API.STREAM.UPDATE." + cmd},
		{"operator", op, "publish a tool command", "publish", p("demo", "cmd.tool.echo")},
		{"operator", op, "write a result", "publish", p("demo", "svc.cardstore.put_result")},
		{"operator", op, "forge a wakeup", "publish", p("demo", "cmd.agent.victim.wakeup")},
		{"operator", op, "dispatch as an agent", "publish", p("demo", "svc.dispatch.call.demo-agent")},
		{"operator", op, "read every reply inbox", "subscription", "_INBOX.>"},
		{"operator", op, "read tool commands", "subscription", "cg." + v + ".demo.*.cmd.tool.echo"},
		{"operator", op, "ack an agent's inbox entries", "publish", p("demo", "svc.inbox.ack.demo-agent")},
		{"operator", op, "ack another operator's inbox entries", "publish", p("demo", "svc.inbox.ack.op-alice")},
		{"operator", op, "put cards as itself", "publish", p("demo", "svc.cardstore.put.op-operator")},
		{"worker", wk, "announce another service's state transition", "publish", stateEvt("demo", "atp")},
		{"worker limited to demo", lim, "announce a state transition in project other", "publish", stateEvt("other", "lim")},
		{"agent", agentDemo, "announce a state transition", "publish", stateEvt("demo", "atp")},
		{"agent", agentDemo, "receive project other's state events", "subscription", "cg." + v + ".other.state.evt.tool.*.state.*"},
	}
	for _, tc := range deny {
		t.Run(tc.actor+" may not "+tc.action, func(t *testing.T) {
			var err error
			if tc.kind == "publish" {
				err = tc.a.nc.Publish(tc.subj, []byte("{}"))
			} else {
				_, err = tc.a.nc.SubscribeSync(tc.subj)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.a.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			tc.a.waitViolation(t, tc.kind, tc.subj)
		})
	}

	allow := []struct {
		actor, action string
		a             *actor
		subj          string
	}{
		{"agent (project without raw commands)", "dispatch as its agents", agentDemo, p("demo", "svc.dispatch.call.demo-agent")},
		{"agent", "read the admission keys", agentDemo, p("demo", "svc.dispatch.keys")},
		{"agent (raw commands)", "publish a raw tool command", agentOther, p("other", "cmd.tool.echo")},
		{"agent demo/alice", "dispatch as alice", alice, p("demo", "svc.dispatch.call.alice")},
		{"worker", "read the admission keys", wk, p("other", "svc.dispatch.keys")},
		{"worker limited to demo", "read project demo's cards", lim, p("demo", "svc.cardstore.get")},
		{"operator", "dispatch as itself", op, p("demo", "svc.dispatch.operator.operator")},
		{"operator", "put a policy", op, p("demo", "svc.authz.put")},
		{"agent demo/alice", "bind its own wakeup durable", alice, "$JS.API.CONSUMER.INFO." + wake + "." + aliceWake},
		{"agent demo/alice", "fetch from its own wakeup durable", alice, "$JS.API.CONSUMER.MSG.NEXT." + wake + "." + aliceWake},
		{"agent (project-wide)", "bind the project's wakeup durable", agentDemo, "$JS.API.CONSUMER.INFO." + wake + "." + demoWake},
		{"agent (project-wide)", "fetch from the project's wakeup durable", agentDemo, "$JS.API.CONSUMER.MSG.NEXT." + wake + "." + demoWake},
		{"agent demo/alice", "list its own inbox", alice, p("demo", "svc.inbox.list.alice")},
		{"agent demo/alice", "ack its own inbox entries", alice, p("demo", "svc.inbox.ack.alice")},
		{"agent demo/alice", "set the epoch of its own turns", alice, p("demo", "svc.inbox.set_epoch.alice")},
		{"agent demo/alice", "read its own cards", alice, p("demo", "svc.cardstore.get.alice")},
		{"agent demo/alice", "put its own cards", alice, p("demo", "svc.cardstore.put.alice")},
		{"agent demo/alice", "list its own turns", alice, p("demo", "svc.cardstore.list_turns.alice")},
		{"agent (project-wide)", "ack on the project's inbox", agentDemo, p("demo", "svc.inbox.ack")},
		{"agent (project-wide)", "ack on any agent's inbox subject", agentDemo, p("demo", "svc.inbox.ack.bob")},
		{"agent (project-wide)", "read cards on any agent's subject", agentDemo, p("demo", "svc.cardstore.get.bob")},
		{"operator", "ack its own inbox entries", op, p("demo", "svc.inbox.ack.op-operator")},
		{"operator", "read its own calls' cards", op, p("demo", "svc.cardstore.get.op-operator")},
		{"worker", "announce its own service's state transition", wk, stateEvt("other", "echo")},
		{"worker limited to demo", "announce its state transition in project demo", lim, stateEvt("demo", "lim")},
	}
	for _, tc := range allow {
		t.Run(tc.actor+" may "+tc.action, func(t *testing.T) { tc.a.allowed(t, tc.subj) })
	}
	t.Run("agents receive their project's state events", func(t *testing.T) {
		for _, a := range []*actor{agentDemo, alice} {
			if _, err := a.nc.SubscribeSync("cg." + v + ".demo.state.evt.tool.*.state.*"); err != nil {
				t.Fatal(err)
			}
			a.allowed(t, p("demo", "svc.dispatch.keys"))
		}
	})
	t.Run("agent demo/alice receives its own wakeups", func(t *testing.T) {
		if _, err := alice.nc.SubscribeSync("cg." + v + ".demo.*.cmd.agent.alice.wakeup"); err != nil {
			t.Fatal(err)
		}
		alice.allowed(t, p("demo", "svc.dispatch.keys"))
	})

	// The core made echo's durable as a pull consumer before worker-echo
	// could connect: the worker's create permission (its tool's filter)
	// cannot turn it into a push consumer delivering on a subject of its
	// choosing, e.g. an agent's wakeups.
	t.Run("worker may not redirect its commands to a wakeup subject", func(t *testing.T) {
		body, _ := json.Marshal(map[string]any{"stream_name": cmd, "config": map[string]any{"durable_name": "utp_tool_echo",
			"filter_subject": "cg." + v + ".*.*.cmd.tool.echo", "ack_policy": "explicit", "deliver_subject": p("demo", "cmd.agent.victim.wakeup")}})
		msg, err := wk.nc.Request("$JS.API.CONSUMER.CREATE."+cmd+".utp_tool_echo.cg."+v+".*.*.cmd.tool.echo", body, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var reply struct {
			Error *struct{ Description string } `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &reply); err != nil || reply.Error == nil || !strings.Contains(reply.Error.Description, "push") {
			t.Fatalf("push consumer create = %s, want refused", msg.Data)
		}
	})

	// The mesh logs what the server refused.
	if s := logs.String(); !strings.Contains(s, "Publish Violation") || !strings.Contains(s, "$JS.API.STREAM.UPDATE."+wake) {
		t.Errorf("the mesh's log names no refused stream update:\n%s", s)
	}

	// A worker's own lease works on its service's subject; a key of
	// another service sent there is refused by the CardStore and audited.
	t.Run("worker may not lease another service's key on its own subject", func(t *testing.T) {
		audits := subscribeAudits(t, admin.nc, v, 16)
		own := p("demo", "svc.cardstore.claim_key.echo")
		if err := svc.Call(ctx, wk.nc, own, natsstore.Codes, map[string]any{"key": "echo/sched", "holder": "w1", "lease_ms": 1000}, &json.RawMessage{}); err != nil {
			t.Fatalf("own lease: %v", err)
		}
		err := svc.Call(ctx, wk.nc, own, natsstore.Codes, map[string]any{"key": "atlas.tasks/state", "holder": "evil", "lease_ms": 3600000}, &json.RawMessage{})
		if !errors.Is(err, cardstore.ErrForbidden) {
			t.Fatalf("another service's key = %v, want forbidden", err)
		}
		deadline := time.After(10 * time.Second)
		for {
			select {
			case r := <-audits:
				if r.Op == natsstore.OpClaimKey && !r.Allowed && r.Detail["key"] == "atlas.tasks/state" {
					return
				}
			case <-deadline:
				t.Fatal("no audit record of the refused lease")
			}
		}
	})

	// A project's raw-command opt-in changes live: its connected agents
	// lose raw commands with the reload (Mesh.SetRawCommands).
	t.Run("SetRawCommands takes raw commands back live", func(t *testing.T) {
		if err := m.SetRawCommands("other", false); err != nil {
			t.Fatal(err)
		}
		subj := p("other", "cmd.tool.echo")
		if err := agentOther.nc.Publish(subj, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		agentOther.waitViolation(t, "publish", subj)
		if err := m.SetRawCommands("other", true); err != nil {
			t.Fatal(err)
		}
		agentOther.allowed(t, subj)
	})

	// The operator lists identities (a request: its own inbox works).
	t.Run("operator lists the identities", func(t *testing.T) {
		cl, err := identity.NewClient(op.nc)
		if err != nil {
			t.Fatal(err)
		}
		list, err := cl.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range list {
			names = append(names, e.Name)
		}
		for _, want := range []string{"admin", "operator", "agent-demo", "agent-demo.alice", "worker-echo", "worker-lim"} {
			if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
				t.Errorf("identity list %v lacks %s", names, want)
			}
		}
	})
}

// TestIdentityAddLive: `utpmesh identity add worker reverse --tools
// reverse` admits a new identity without a restart; a worker holding the
// seed the CLI made serves reverse and an agent's call gets its result;
// the list is kept under the data directory; `identity remove` revokes
// it. Bad input and a taken tool are refused with what to type instead.
func TestIdentityAddLive(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quietLog, Tools: []worker.Tool{echo.Tool()},
		Identities: &mesh.IdentityConfig{Workers: []meshauth.Identity{ // as up makes it
			{Role: meshauth.RoleWorker, Service: "echo", Tools: []meshauth.Tool{{Name: "echo", Target: "echo"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	cm := &cliMesh{m: m, url: m.ClientURL()}
	seeds := filepath.Join(t.TempDir(), "creds")
	admin := m.CredsFile("admin")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"identity", "add", "worker", "reverse"}, "needs --tools"},
		{[]string{"identity", "add", "robot", "x"}, "use worker"},
		{[]string{"identity", "add", "agent", "demo"}, "PROJECT/AGENT"},
		{[]string{"identity", "add", "worker", "atp", "--tools", "x"}, "catalogue service"},
		{[]string{"identity", "add", "worker", "rev", "--tools", "r", "--projects", "a.b"}, "--projects"},
	} {
		r := cm.must(t, 2, append(tc.args, "--creds", admin, "--creds-dir", seeds)...)
		wantContains(t, strings.Join(tc.args, " "), r.stderr, tc.want)
	}
	r := cm.must(t, 1, "identity", "add", "worker", "mirror", "--tools", "echo", "--creds", admin, "--creds-dir", seeds)
	wantContains(t, "a taken tool", r.stderr, "echo is served by", "already")

	r = cm.must(t, 0, "identity", "add", "worker", "reverse", "--tools", "reverse", "--creds", admin, "--creds-dir", seeds)
	seed := creds.SeedPath(seeds, "worker-reverse")
	wantContains(t, "identity add", r.stdout, "worker-reverse admitted (no restart)", seed)
	if fi, err := os.Stat(seed); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("seed %s: %v; want a 0600 file", seed, err)
	}
	seedText, err := os.ReadFile(seed)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := creds.PublicKey(seed)
	if data, err := os.ReadFile(filepath.Join(dir, identity.FileName)); err != nil || !strings.Contains(string(data), `"service": "reverse"`) ||
		!strings.Contains(string(data), pub) || bytes.Contains(data, bytes.TrimSpace(seedText)) {
		t.Fatalf("identity list file (want its public key, never its seed): %v\n%s", err, data)
	}

	wk, err := connectAs(t, cm.url, seed)
	if err != nil {
		t.Fatalf("connect with the new seed: %v", err)
	}
	rev := worker.Tool{Name: "reverse", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
		return worker.OK(map[string]any{"got": string(c.Arguments)}), nil
	}}
	rt, err := worker.Start(ctx, wk.nc, []worker.Tool{rev}, worker.WithProjects("demo"), worker.WithoutAuthorizer(), worker.WithLogger(quietLog))
	if err != nil {
		t.Fatalf("serve reverse with the added identity: %v", err)
	}
	t.Cleanup(func() { _ = rt.Stop(context.Background()) })
	ag, err := connectAs(t, cm.url, m.CredsFile("agent-demo"))
	if err != nil {
		t.Fatal(err)
	}
	ac, err := agent.New(ag.nc, agent.Config{Project: "demo", AgentID: "a1", Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := ac.Call(cctx, agent.CallRequest{ToolName: "reverse", Arguments: json.RawMessage(`{"x":1}`), AgentTurnID: "turn-1"})
	if err != nil || out.Result == nil || !strings.Contains(string(out.Result.Result), `x`) {
		t.Fatalf("call reverse: %+v, %v", out, err)
	}

	// A worker limited to project demo: the core made its durable with
	// demo's filter only; the SDK runtime binds it and serves demo's calls.
	cm.must(t, 0, "identity", "add", "worker", "local", "--tools", "local", "--projects", "demo", "--creds", admin, "--creds-dir", seeds)
	lw, err := connectAs(t, cm.url, creds.SeedPath(seeds, "worker-local"))
	if err != nil {
		t.Fatal(err)
	}
	local := worker.Tool{Name: "local", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
		return worker.OK(map[string]any{"project": c.ProjectID}), nil
	}}
	lrt, err := worker.Start(ctx, lw.nc, []worker.Tool{local}, worker.WithProjects("demo"), worker.WithoutAuthorizer(), worker.WithLogger(quietLog))
	if err != nil {
		t.Fatalf("serve local with the identity limited to demo: %v", err)
	}
	t.Cleanup(func() { _ = lrt.Stop(context.Background()) })
	out, err = ac.Call(cctx, agent.CallRequest{ToolName: "local", AgentTurnID: "turn-2"})
	if err != nil || out.Result == nil || !strings.Contains(string(out.Result.Result), `"demo"`) {
		t.Fatalf("call local in demo: %+v, %v", out, err)
	}
	select {
	case err := <-lw.errs:
		t.Fatalf("the limited worker hit a permission violation: %v", err)
	default:
	}

	r = cm.must(t, 0, "identity", "list", "--creds", admin)
	wantContains(t, "identity list", r.stdout, "worker-reverse", "yes", "tools reverse", "operator", "tools local; projects demo")

	r = cm.must(t, 0, "identity", "remove", "worker-reverse", "--creds", admin)
	wantContains(t, "identity remove", r.stdout, "worker-reverse revoked")
	if _, err := connectAs(t, cm.url, seed); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("connect with a removed identity = %v, want an authorization violation", err)
	}
	r = cm.must(t, 1, "identity", "remove", "worker-reverse", "--creds", admin)
	wantContains(t, "remove twice", r.stderr, "was not added")
}
