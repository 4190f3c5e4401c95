package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/internal/audit"
	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/internal/reqsign"
	agentpkg "github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/registry/natsreg"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/subjects"
)

// actor is a connection with one identity whose async errors (permission
// violations) are collected.
type actor struct {
	nc   *nats.Conn
	errs chan error
}

func connectAs(t *testing.T, url, credsFile string) (*actor, error) {
	t.Helper()
	a := &actor{errs: make(chan error, 64)}
	opts := []nats.Option{nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { a.errs <- err })}
	if credsFile != "" {
		opt, err := creds.Option(credsFile)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, opt)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(nc.Close)
	a.nc = nc
	return a, nil
}

// waitViolation waits for the server's permissions violation naming subj.
func (a *actor) waitViolation(t *testing.T, kind, subj string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-a.errs:
			s := strings.ToLower(err.Error())
			if strings.Contains(s, "permissions violation for "+kind) && strings.Contains(err.Error(), subj) {
				return
			}
		case <-deadline:
			t.Fatalf("no permissions violation for %s %q", kind, subj)
		}
	}
}

// TestNATSIdentities: with identities on, each role may do exactly its
// part. The table is actor role × forbidden action → the server's
// permissions violation; the legitimate path (admin writes the policy, an
// agent calls echo, an external worker with worker credentials runs it
// behind the gate, the inbox wakes the agent) still works.
func TestNATSIdentities(t *testing.T) {
	ctx := context.Background()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quietLog, Auth: &mesh.AuthConfig{},
		Projects: []string{"demo", "other"},
		Identities: &mesh.IdentityConfig{Workers: []meshauth.Identity{
			{Role: meshauth.RoleWorker, Service: "echo", Tools: []meshauth.Tool{{Name: "echo", Target: "echo"}}},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	url := m.ClientURL()

	w := startProc(t, "worker", "--nats", url, "--creds", m.CredsFile("worker-echo"), "--log-level", "debug", "echo")
	w.waitLine(t, "worker serving")

	admin, err := connectAs(t, url, m.CredsFile("admin"))
	if err != nil {
		t.Fatal(err)
	}
	agent, err := connectAs(t, url, m.CredsFile("agent-demo"))
	if err != nil {
		t.Fatal(err)
	}
	wk, err := connectAs(t, url, m.CredsFile("worker-echo"))
	if err != nil {
		t.Fatal(err)
	}
	op, err := connectAs(t, url, m.CredsFile("operator"))
	if err != nil {
		t.Fatal(err)
	}

	// Without credentials, or with a key the mesh never minted, no
	// connection at all.
	if _, err := connectAs(t, url, ""); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("connect without credentials = %v, want authorization violation", err)
	}
	stranger := t.TempDir()
	if _, _, err := meshauth.Ensure(stranger, "admin"); err != nil {
		t.Fatal(err)
	}
	if _, err := connectAs(t, url, creds.SeedPath(stranger, "admin")); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("connect with an unknown key = %v, want authorization violation", err)
	}

	v := subjects.DefaultVersion
	pub := func(a *actor, subj string) func() error {
		return func() error { return a.nc.Publish(subj, []byte("{}")) }
	}
	sub := func(a *actor, subj string) func() error {
		return func() error { _, err := a.nc.SubscribeSync(subj); return err }
	}
	tests := []struct {
		actor, action string
		a             *actor
		do            func() error
		kind, subj    string
	}{
		{"agent", "publish a wakeup", agent, pub(agent, "cg."+v+".demo.main.cmd.agent.victim.wakeup"), "publish", "cg." + v + ".demo.main.cmd.agent.victim.wakeup"},
		{"agent", "publish a report", agent, pub(agent, "cg."+v+".demo.main.cmd.sys.inbox.report"), "publish", "cg." + v + ".demo.main.cmd.sys.inbox.report"},
		{"agent", "put a policy", agent, pub(agent, "cg."+v+".demo.default.svc.authz.put"), "publish", "cg." + v + ".demo.default.svc.authz.put"},
		{"agent", "switch mandates off", agent, pub(agent, "cg."+v+".demo.default.svc.authz.config_put"), "publish", "cg." + v + ".demo.default.svc.authz.config_put"},
		{"agent", "roll a policy back", agent, pub(agent, "cg."+v+".demo.default.svc.authz.rollback"), "publish", "cg." + v + ".demo.default.svc.authz.rollback"},
		{"agent", "write the registry", agent, pub(agent, "cg."+v+".demo.default.svc.registry.put"), "publish", "cg." + v + ".demo.default.svc.registry.put"},
		{"agent", "fetch echo's commands", agent, pub(agent, "$JS.API.CONSUMER.MSG.NEXT.cg_cmd_"+v+".utp_tool_echo"), "publish", "$JS.API.CONSUMER.MSG.NEXT.cg_cmd_" + v + ".utp_tool_echo"},
		{"agent", "read tool commands", agent, sub(agent, "cg."+v+".demo.*.cmd.tool.echo"), "subscription", "cg." + v + ".demo.*.cmd.tool.echo"},
		{"agent", "call a tool in another project", agent, pub(agent, "cg."+v+".other.main.cmd.tool.echo"), "publish", "cg." + v + ".other.main.cmd.tool.echo"},
		{"agent", "publish a raw tool command (admission: calls go through svc.dispatch)", agent, pub(agent, "cg."+v+".demo.main.cmd.tool.echo"), "publish", "cg." + v + ".demo.main.cmd.tool.echo"},
		{"agent", "publish a raw PMO command", agent, pub(agent, "cg."+v+".demo.main.cmd.sys.pmo.internal.list_tools"), "publish", "cg." + v + ".demo.main.cmd.sys.pmo.internal.list_tools"},
		{"agent", "dispatch in another project", agent, pub(agent, "cg."+v+".other.main.svc.dispatch.call.a1"), "publish", "cg." + v + ".other.main.svc.dispatch.call.a1"},
		{"agent", "dispatch as an operator", agent, pub(agent, "cg."+v+".demo.main.svc.dispatch.operator.ops"), "publish", "cg." + v + ".demo.main.svc.dispatch.operator.ops"},
		{"agent", "use another project's CardStore", agent, pub(agent, "cg."+v+".other.default.svc.cardstore.put"), "publish", "cg." + v + ".other.default.svc.cardstore.put"},
		{"agent", "wake up as another project's agent", agent, sub(agent, "cg."+v+".other.*.cmd.agent.*.wakeup"), "subscription", "cg." + v + ".other.*.cmd.agent.*.wakeup"},
		{"agent", "publish an audit record", agent, pub(agent, "cg."+v+".demo.main.evt.sys.authz.decision"), "publish", "cg." + v + ".demo.main.evt.sys.authz.decision"},
		{"agent", "write a tool.result (put_result)", agent, pub(agent, "cg."+v+".demo.default.svc.cardstore.put_result"), "publish", "cg." + v + ".demo.default.svc.cardstore.put_result"},
		{"agent", "take a call's execution claim", agent, pub(agent, "cg."+v+".demo.default.svc.cardstore.claim"), "publish", "cg." + v + ".demo.default.svc.cardstore.claim"},
		{"worker", "fetch the PMO's commands", wk, pub(wk, "$JS.API.CONSUMER.MSG.NEXT.cg_cmd_"+v+".utp_pmo"), "publish", "$JS.API.CONSUMER.MSG.NEXT.cg_cmd_" + v + ".utp_pmo"},
		{"worker", "fetch another tool's commands", wk, pub(wk, "$JS.API.CONSUMER.MSG.NEXT.cg_cmd_"+v+".utp_tool_atlas_task_list"), "publish", "$JS.API.CONSUMER.MSG.NEXT.cg_cmd_" + v + ".utp_tool_atlas_task_list"},
		{"worker", "widen its durable to every command", wk, pub(wk, "$JS.API.CONSUMER.CREATE.cg_cmd_"+v+".utp_tool_echo"), "publish", "$JS.API.CONSUMER.CREATE.cg_cmd_" + v + ".utp_tool_echo"},
		{"worker", "create its durable on another filter", wk, pub(wk, "$JS.API.CONSUMER.CREATE.cg_cmd_"+v+".utp_tool_echo.cg."+v+".*.*.cmd.>"), "publish", "$JS.API.CONSUMER.CREATE.cg_cmd_" + v + ".utp_tool_echo.cg." + v + ".*.*.cmd.>"},
		{"worker", "publish a wakeup", wk, pub(wk, "cg."+v+".demo.main.cmd.agent.victim.wakeup"), "publish", "cg." + v + ".demo.main.cmd.agent.victim.wakeup"},
		{"worker", "put a policy", wk, pub(wk, "cg."+v+".demo.default.svc.authz.put"), "publish", "cg." + v + ".demo.default.svc.authz.put"},
		{"worker", "publish a tool command", wk, pub(wk, "cg."+v+".demo.main.cmd.tool.echo"), "publish", "cg." + v + ".demo.main.cmd.tool.echo"},
		{"worker", "read agents' wakeups", wk, sub(wk, "cg."+v+".demo.*.cmd.agent.*.wakeup"), "subscription", "cg." + v + ".demo.*.cmd.agent.*.wakeup"},
		{"worker", "write a result on the core's put_result", wk, pub(wk, "cg."+v+".demo.default.svc.cardstore.put_result"), "publish", "cg." + v + ".demo.default.svc.cardstore.put_result"},
		{"worker", "claim on the core's claim", wk, pub(wk, "cg."+v+".demo.default.svc.cardstore.claim"), "publish", "cg." + v + ".demo.default.svc.cardstore.claim"},
		{"worker", "release on the core's release", wk, pub(wk, "cg."+v+".demo.default.svc.cardstore.release"), "publish", "cg." + v + ".demo.default.svc.cardstore.release"},
		{"worker", "write another tool's result", wk, pub(wk, "cg."+v+".demo.default.svc.cardstore.put_result.atlas_task_list"), "publish", "cg." + v + ".demo.default.svc.cardstore.put_result.atlas_task_list"},
		{"worker", "claim another tool's call", wk, pub(wk, "cg."+v+".demo.default.svc.cardstore.claim.atlas_task_list"), "publish", "cg." + v + ".demo.default.svc.cardstore.claim.atlas_task_list"},
		{"agent", "write a result on a tool's subject", agent, pub(agent, "cg."+v+".demo.default.svc.cardstore.put_result.echo"), "publish", "cg." + v + ".demo.default.svc.cardstore.put_result.echo"},
		{"agent", "claim on a tool's subject", agent, pub(agent, "cg."+v+".demo.default.svc.cardstore.claim.echo"), "publish", "cg." + v + ".demo.default.svc.cardstore.claim.echo"},
		{"agent", "start a call on a tool's subject", agent, pub(agent, "cg."+v+".demo.default.svc.cardstore.start_call.echo"), "publish", "cg." + v + ".demo.default.svc.cardstore.start_call.echo"},
		{"worker", "start another tool's call", wk, pub(wk, "cg."+v+".demo.default.svc.cardstore.start_call.atlas_task_list"), "publish", "cg." + v + ".demo.default.svc.cardstore.start_call.atlas_task_list"},
		{"agent", "register a tool on its subject", agent, pub(agent, "cg."+v+".demo.default.svc.registry.put.echo"), "publish", "cg." + v + ".demo.default.svc.registry.put.echo"},
		{"worker", "register another tool", wk, pub(wk, "cg."+v+".demo.default.svc.registry.put.atlas_task_list"), "publish", "cg." + v + ".demo.default.svc.registry.put.atlas_task_list"},
		{"worker", "write the registry on the admin's subject", wk, pub(wk, "cg."+v+".demo.default.svc.registry.put"), "publish", "cg." + v + ".demo.default.svc.registry.put"},
		{"worker", "delete a registry entry", wk, pub(wk, "cg."+v+".demo.default.svc.registry.delete"), "publish", "cg." + v + ".demo.default.svc.registry.delete"},
		{"operator", "dispatch as an agent", op, pub(op, "cg."+v+".demo.main.svc.dispatch.call.demo-agent"), "publish", "cg." + v + ".demo.main.svc.dispatch.call.demo-agent"},
		{"operator", "dispatch as another operator", op, pub(op, "cg."+v+".demo.main.svc.dispatch.operator.alice"), "publish", "cg." + v + ".demo.main.svc.dispatch.operator.alice"},
		{"operator", "read an agent's wakeups", op, sub(op, "cg."+v+".demo.*.cmd.agent.demo-agent.wakeup"), "subscription", "cg." + v + ".demo.*.cmd.agent.demo-agent.wakeup"},
		{"operator", "read every wakeup", op, sub(op, "cg."+v+".*.*.cmd.agent.*.wakeup"), "subscription", "cg." + v + ".*.*.cmd.agent.*.wakeup"},
		{"operator", "ack inbox entries", op, pub(op, "cg."+v+".demo.default.svc.inbox.ack"), "publish", "cg." + v + ".demo.default.svc.inbox.ack"},
		{"operator", "publish a tool command", op, pub(op, "cg."+v+".demo.main.cmd.tool.echo"), "publish", "cg." + v + ".demo.main.cmd.tool.echo"},
		{"worker", "switch mandates off", wk, pub(wk, "cg."+v+".demo.default.svc.authz.config_put"), "publish", "cg." + v + ".demo.default.svc.authz.config_put"},
	}
	for _, tc := range tests {
		t.Run(tc.actor+" may not "+tc.action, func(t *testing.T) {
			if err := tc.do(); err != nil {
				t.Fatal(err)
			}
			if err := tc.a.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			tc.a.waitViolation(t, tc.kind, tc.subj)
		})
	}

	// A tool.result sent with put (which agents may use for their own
	// cards) is refused: results go through put_result only.
	t.Run("agent may not forge a result with put", func(t *testing.T) {
		audits := make(chan audit.Record, 16)
		ap, _ := subjects.AuditPattern(v)
		asub, err := admin.nc.Subscribe(ap, func(msg *nats.Msg) {
			var r audit.Record
			if json.Unmarshal(msg.Data, &r) == nil {
				audits <- r
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = asub.Unsubscribe() }()
		if err := admin.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		forged := &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: card.TypeToolResult, ToolCallID: "call-victim",
			CreatedAt: time.Now().UTC(), Metadata: card.Metadata{AgentID: "victim", AgentTurnID: "turn-victim", TurnEpoch: 1, StepID: "s1"},
			Content: json.RawMessage(`{"status":"success","result":{"forged":true}}`)}
		ep := svc.NewEndpoint(agent.nc, natsstore.ServiceName, natsstore.Codes)
		err = ep.Call(ctx, "demo", natsstore.OpPut, map[string]any{"cards": []*card.Card{forged}}, &struct{}{})
		if !errors.Is(err, natsstore.ErrWrongOp) || !strings.Contains(err.Error(), "only workers and the mesh core") {
			t.Fatalf("forged result via put = %v, want wrong_op", err)
		}
		if _, err := m.Cards().FindToolResult(ctx, "demo", "turn-victim", "call-victim"); !errors.Is(err, cardstore.ErrNotFound) {
			t.Fatalf("the forged result was stored: %v", err)
		}
		for {
			select {
			case r := <-audits:
				if r.Service == "cardstore" && r.Op == "put" && r.Code == "wrong_op" && r.Detail["tool_call_id"] == "call-victim" {
					return
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no audit record of the forged result sent with put")
			}
		}
	})

	// A worker of echo, on its own tool's subjects, may not claim or
	// answer a call of another tool: refused (forbidden) and audited.
	t.Run("worker may not forge another tool's result on its own subject", func(t *testing.T) {
		audits := subscribeAudits(t, admin.nc, v, 16)
		callContent, _ := json.Marshal(card.ToolCallContent{ToolName: "ATLAS_TASK_LIST", Arguments: json.RawMessage(`{}`), TargetSubject: "cg." + v + ".demo.main.cmd.tool.atlas_task_list"})
		victim := &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: card.TypeToolCall, ToolCallID: "call-atlas", Content: callContent,
			CreatedAt: time.Now().UTC(), Metadata: card.Metadata{AgentID: "victim", AgentTurnID: "turn-atlas", TurnEpoch: 1, StepID: "s1", ToolCallID: "call-atlas"}}
		if err := m.Cards().Put(ctx, victim); err != nil {
			t.Fatal(err)
		}
		forged := &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: card.TypeToolResult, ToolCallID: "call-atlas", CreatedAt: time.Now().UTC(),
			Metadata: card.Metadata{AgentTurnID: "turn-atlas", ToolCallID: "call-atlas", FunctionName: "echo"},
			Content:  json.RawMessage(`{"status":"success","after_execution":"suspend","result":{"forged":true}}`)}
		wcards, err := natsstore.NewClient(wk.nc)
		if err != nil {
			t.Fatal(err)
		}
		wctx := cardstore.WithTool(ctx, "echo")
		// A service's own lease (not a call's) is a worker's to take.
		if _, err := wcards.Claim(ctx, cardstore.ClaimRequest{ProjectID: "demo", Key: "echo/lease", Holder: "w", Lease: time.Minute}); err != nil {
			t.Fatalf("service lease by the echo worker: %v", err)
		}
		if err := wcards.Release(ctx, "demo", "echo/lease", "w"); err != nil {
			t.Fatalf("service lease release by the echo worker: %v", err)
		}
		if _, err := wcards.Claim(wctx, cardstore.ClaimRequest{ProjectID: "demo", Key: cardstore.CallKey{AgentTurnID: "turn-atlas", ToolCallID: "call-atlas"}.String(), Holder: "evil", Lease: time.Minute}); !errors.Is(err, cardstore.ErrForbidden) {
			t.Fatalf("claim of an ATLAS call by the echo worker = %v, want forbidden", err)
		}
		if _, err := wcards.StartCall(wctx, cardstore.StartCallRequest{ProjectID: "demo", AgentTurnID: "turn-atlas", ToolCallID: "call-atlas", ToolCallCardID: victim.CardID, Holder: "evil", Lease: time.Minute}); !errors.Is(err, cardstore.ErrForbidden) {
			t.Fatalf("start of an ATLAS call by the echo worker = %v, want forbidden", err)
		}
		if err := wcards.Put(wctx, forged); !errors.Is(err, cardstore.ErrForbidden) || !strings.Contains(err.Error(), `calls tool "ATLAS_TASK_LIST"`) {
			t.Fatalf("forged ATLAS result by the echo worker = %v, want forbidden", err)
		}
		if _, err := m.Cards().FindToolResult(ctx, "demo", "turn-atlas", "call-atlas"); !errors.Is(err, cardstore.ErrNotFound) {
			t.Fatalf("the forged result was stored: %v", err)
		}
		for seen := map[string]bool{}; !seen["claim"] || !seen["start_call"] || !seen["put_result"]; {
			select {
			case r := <-audits:
				if r.Actor == "tool:echo" && r.Code == "forbidden" && r.Detail["key"]+r.Detail["tool_call_id"] != "" {
					seen[r.Op] = true
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("audit records seen: %v; want the refused claim, start_call and put_result of tool:echo", seen)
			}
		}
	})

	// Every registry, policy and config change is audited with the
	// identity that signed it; a change signed by a key the mesh never
	// minted, or a worker registering another tool on its own subject, is
	// refused and audited.
	t.Run("admin changes are audited with who made them", func(t *testing.T) {
		audits := subscribeAudits(t, admin.nc, v, 64)
		want := func(service, op, actor string, allowed bool) audit.Record {
			t.Helper()
			timeout := time.After(10 * time.Second)
			for {
				select {
				case r := <-audits:
					if r.Service == service && r.Op == op && r.Actor == actor && r.Allowed == allowed {
						return r
					}
				case <-timeout:
					t.Fatalf("no audit record %s %s by %s (allowed %v)", service, op, actor, allowed)
				}
			}
		}
		ac, _ := natsauthz.NewClient(admin.nc, "")
		if _, err := ac.PutPolicies(ctx, "demo", `permit(principal, action == Action::"echo", resource in Project::"demo");`); err != nil {
			t.Fatal(err)
		}
		if r := want("authz", "put", "identity:admin", true); r.Detail["version"] == "" || r.Detail["sha256"] == "" || r.Project != "demo" {
			t.Fatalf("policy put record = %+v", r)
		}
		if err := ac.PutConfig(ctx, "demo", authz.ProjectConfig{Mandate: authz.MandateRequired}); err != nil {
			t.Fatal(err)
		}
		want("authz", "config_put", "identity:admin", true)

		areg, _ := natsreg.NewClient(admin.nc)
		echoEntry, err := areg.Get(ctx, "demo", "echo")
		if err != nil {
			t.Fatal(err)
		}
		probe := *echoEntry
		probe.ToolName, probe.TargetSubject = "audit_probe", "cg.{ver}.{project_id}.{channel_id}.cmd.tool.audit_probe"
		if _, err := areg.Put(ctx, &probe); err != nil {
			t.Fatal(err)
		}
		want("registry", "put", "identity:admin", true)
		if err := areg.Delete(ctx, "demo", "audit_probe"); err != nil {
			t.Fatal(err)
		}
		if r := want("registry", "delete", "identity:admin", true); r.Detail["tool_name"] != "audit_probe" {
			t.Fatalf("delete record = %+v", r)
		}

		// The echo worker registers its own tool, signed as itself.
		wreg, _ := natsreg.NewClient(wk.nc)
		if _, err := wreg.Put(ctx, echoEntry); err != nil {
			t.Fatalf("worker registers echo: %v", err)
		}
		want("registry", "put", "identity:worker-echo", true)
		// On its own subject, an entry of another tool is refused.
		forgedEntry := *echoEntry
		forgedEntry.ToolName = "audit_forged"
		raw, _ := json.Marshal(map[string]any{"entry": &forgedEntry})
		err = svc.Call(ctx, wk.nc, "cg."+v+".demo.default.svc.registry.put.echo", natsreg.Codes, json.RawMessage(raw), &json.RawMessage{})
		if !errors.Is(err, natsreg.ErrForbidden) {
			t.Fatalf("worker registers another tool on its subject = %v, want forbidden", err)
		}
		want("registry", "put", "unverified:tool:echo", false)
		if _, err := m.Registry().Get(ctx, "demo", "audit_forged"); err == nil {
			t.Fatal("the forged registry entry was stored")
		}

		// A policy put signed with a key the mesh never minted, sent
		// over the admin's connection: refused, audited.
		stranger, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		spub, _ := stranger.PublicKey()
		subj := "cg." + v + ".demo.default.svc.authz.put"
		body, _ := reqsign.Wrap(&nats.Conn{Opts: nats.Options{Nkey: spub, SignatureCB: stranger.Sign}}, subj, []byte(`{"policies":"permit(principal, action, resource);"}`))
		err = svc.Call(ctx, admin.nc, subj, natsauthz.Codes, json.RawMessage(body), &json.RawMessage{})
		if !errors.Is(err, natsauthz.ErrForbidden) || !strings.Contains(err.Error(), "no identity of this mesh") {
			t.Fatalf("put signed by a stranger = %v, want forbidden", err)
		}
		if r := want("authz", "put", "unverified:admin-or-core", false); !strings.Contains(r.Reason, spub) {
			t.Fatalf("refusal record does not name the key: %+v", r)
		}
		dsubj := "cg." + v + ".demo.default.svc.registry.delete"
		dbody, _ := reqsign.Wrap(&nats.Conn{Opts: nats.Options{Nkey: spub, SignatureCB: stranger.Sign}}, dsubj, []byte(`{"tool_name":"echo"}`))
		err = svc.Call(ctx, admin.nc, dsubj, natsreg.Codes, json.RawMessage(dbody), &json.RawMessage{})
		if !errors.Is(err, natsreg.ErrForbidden) {
			t.Fatalf("registry delete signed by a stranger = %v, want forbidden", err)
		}
		want("registry", "delete", "unverified:admin-or-core", false)
		if _, err := m.Registry().Get(ctx, "demo", "echo"); err != nil {
			t.Fatalf("echo's entry is gone after the stranger's delete: %v", err)
		}
		if doc, err := m.Auth().Store.Policies(ctx, "demo"); err != nil || strings.Contains(doc.Policies, "permit(principal, action, resource);") {
			t.Fatalf("the stranger's policy was stored: %+v %v", doc, err)
		}
	})

	// A command on echo's subject for a call of another tool: the echo
	// worker may not answer it (the CardStore refuses its claim), so it
	// dead-letters the command instead of retrying for ever.
	t.Run("worker dead-letters a call of another tool sent to it", func(t *testing.T) {
		dead := make(chan *nats.Msg, 8)
		if _, err := admin.nc.ChanSubscribe("cg."+v+".demo.main.evt.sys.deadletter.command", dead); err != nil {
			t.Fatal(err)
		}
		if err := admin.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		callContent, _ := json.Marshal(card.ToolCallContent{ToolName: "ATLAS_TASK_LIST", Arguments: json.RawMessage(`{}`), TargetSubject: "cg." + v + ".demo.main.cmd.tool.echo"})
		cc := &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: card.TypeToolCall, ToolCallID: "call-misrouted", Content: callContent,
			CreatedAt: time.Now().UTC(), Metadata: card.Metadata{AgentID: "a1", AgentTurnID: "turn-misrouted", TurnEpoch: 1, StepID: "s1", ToolCallID: "call-misrouted"}}
		acards, _ := natsstore.NewClient(agent.nc)
		if err := acards.Put(ctx, cc); err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(utp.Command{AgentID: "a1", AgentTurnID: "turn-misrouted", TurnEpoch: 1, ToolCallID: "call-misrouted",
			AfterExecution: card.Suspend, ToolCallCardID: cc.CardID, StepID: "s1"})
		// The admin's raw command (an agent may not publish one).
		if err := admin.nc.Publish("cg."+v+".demo.main.cmd.tool.echo", body); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-dead:
			var dl worker.DeadLetter
			if json.Unmarshal(d.Data, &dl) != nil || dl.Source != "worker:echo" || !strings.Contains(dl.Reason, `calls tool "ATLAS_TASK_LIST"`) {
				t.Fatalf("dead letter = %s", d.Data)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the misrouted command was not dead-lettered")
		}
		if _, err := m.Cards().FindToolResult(ctx, "demo", "turn-misrouted", "call-misrouted"); !errors.Is(err, cardstore.ErrNotFound) {
			t.Fatalf("the echo worker wrote a result for an ATLAS call: %v", err)
		}
	})

	// The legitimate path, each role with its own identity.
	t.Run("admin writes the policy, an agent calls, the worker runs it", func(t *testing.T) {
		ac, _ := natsauthz.NewClient(admin.nc, "")
		if _, err := ac.PutPolicies(ctx, "demo", `permit(principal, action == Action::"echo", resource in Project::"demo");`); err != nil {
			t.Fatalf("admin put policy: %v", err)
		}
		key, _, err := m.Auth().Keys.Ensure(ctx, "demo")
		if err != nil {
			t.Fatal(err)
		}
		tok, err := mandate.Issue(key, mandate.Claims{Subject: "agent-sec", ExpiresAt: time.Now().Add(time.Hour).Unix(),
			Mandate: mandate.Grant{PolicySet: `permit(principal, action == Action::"echo", resource);`}}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		wake := make(chan *nats.Msg, 4)
		wsub, _ := subjects.WakeupPattern(v, "demo", "*", "agent-sec")
		if _, err := agent.nc.ChanSubscribe(wsub, wake); err != nil {
			t.Fatal(err)
		}
		// The agent dispatches through the mesh's admission; the external
		// worker verifies the admission and runs the call.
		ag, err := agentpkg.New(agent.nc, agentpkg.Config{Project: "demo", AgentID: "agent-sec", Mandate: tok, Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		defer ag.Close()
		out, err := ag.Call(ctx, agentpkg.CallRequest{ToolName: "echo", Arguments: json.RawMessage(`{"x":1}`), AgentTurnID: "turn-call-sec", ToolCallID: "call-sec"})
		if err != nil {
			t.Fatal(err)
		}
		if r := out.Result; r.Status != card.StatusSuccess {
			t.Fatalf("result = %+v (error %+v), want success", r, r.Error)
		}
		cc, err := m.Cards().Get(ctx, "demo", out.Call.ToolCallCardID)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := cc.Metadata.Extra["mandate"]; ok {
			t.Fatal("the tool.call card carries the mandate: workers could read it")
		}
	})
}

// TestCLICreds: against a mesh with identities the CLI needs credentials,
// says how to pass them, and works with the admin's.
func TestCLICreds(t *testing.T) {
	m, err := mesh.Start(context.Background(), mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quietLog, Auth: &mesh.AuthConfig{},
		Identities: &mesh.IdentityConfig{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	stranger := t.TempDir()
	if _, _, err := meshauth.Ensure(stranger, "admin"); err != nil {
		t.Fatal(err)
	}
	strangerSeed := creds.SeedPath(stranger, "admin")
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no credentials", []string{"policy", "config", "--project", "demo"}, 1,
			"the mesh requires credentials: pass --creds FILE or set $NATS_CREDS, e.g. DATA/creds/admin.nk (admin work) or DATA/creds/operator.nk (an operator's) of 'utpmesh up'"},
		// The hint names the identity the command acts as: a call's is
		// its project's agent identity, not the admin's.
		{"call without credentials", []string{"call", "echo"}, 1,
			"the mesh requires credentials: pass --creds FILE or set $NATS_CREDS, e.g. DATA/creds/agent-demo.nk (the agent identity of project demo; ./utpmesh-data/creds/ beside a local up) of 'utpmesh up'"},
		{"mcp of another project", []string{"mcp", "--project", "sales"}, 1, "e.g. DATA/creds/agent-sales.nk (the agent identity of project sales;"},
		{"confirm", []string{"confirm", "cfm_calendar_0123456789abcdef"}, 1, "e.g. DATA/creds/agent-demo.nk (the agent identity of project demo;"},
		{"another mesh's credentials", []string{"call", "echo", "--creds", strangerSeed}, 1,
			"(the mesh refused the credentials " + strangerSeed + ": pass DATA/creds/agent-demo.nk (the agent identity of project demo; ./utpmesh-data/creds/ beside a local up) of this mesh's 'utpmesh up')"},
		{"missing file", []string{"policy", "config", "--project", "demo", "--creds", "/nonexistent/admin.nk"}, 2, "--creds: creds: credentials"},
		{"admin", []string{"policy", "config", "--project", "demo", "--creds", m.CredsFile("admin")}, 0, "mandate required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, code := runCLI(m, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, output:\n%s\nwant exit %d and %q", code, out, tc.code, tc.want)
			}
		})
	}
}

// TestUpExternalWorkerWithCreds is issue 12's set-up with identities on:
// `up --services atlas.utility`, an external `utpmesh worker echo` with the
// worker-echo seed up minted, the operator CLI with the admin seed. A call
// without a valid mandate is refused by the external worker; one with a
// mandate runs there; a worker without credentials cannot connect.
func TestUpExternalWorkerWithCreds(t *testing.T) {
	cwd := t.TempDir()
	dir := filepath.Join(cwd, "utpmesh-data") // the default --data, seen from cwd
	url := "nats://127.0.0.1:" + freePort(t)
	up := startProc(t, "up", "--data", dir, "--nats-listen", strings.TrimPrefix(url, "nats://"), "--metrics-addr", "", "--ui-listen", "",
		"--services", "atlas.utility", "--log-level", "debug")
	up.waitLine(t, "mesh ready") // identities, issuer keys and the demo policy exist
	creds := func(name string) string { return dir + "/creds/" + name + ".nk" }

	if code, stderr := runProc(t, "worker", "--nats", url, "echo"); code != 1 || !strings.Contains(stderr, "Authorization Violation") {
		t.Fatalf("worker without creds: exit %d, stderr:\n%s", code, stderr)
	}
	w := startProc(t, "worker", "--nats", url, "--creds", creds("worker-echo"), "--log-level", "debug", "echo")
	w.waitLine(t, "worker serving")

	cli := func(args ...string) (string, int) {
		var out strings.Builder
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		code := runArgs(ctx, append(args, "--nats", url), &out, &out)
		return out.String(), code
	}
	write := func(name, text string) string {
		p := t.TempDir() + "/" + name
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	echo := write("echo.cedar", `permit(principal, action == Action::"echo", resource in Project::"demo");`+"\n")
	if out, code := cli("policy", "put", "--project", "demo", "--yes", "--creds", creds("admin"), echo); code != 0 {
		t.Fatalf("admin policy put: exit %d\n%s", code, out)
	}
	tok, code := runMandateIssue(t, dir, echo)
	if code != 0 {
		t.Fatalf("mandate issue: exit %d\n%s", code, tok)
	}
	own, err := mandate.GenerateKey("demo") // not the mesh's key
	if err != nil {
		t.Fatal(err)
	}
	forged, err := mandate.Issue(own, mandate.Claims{Subject: "a1", ExpiresAt: time.Now().Add(time.Hour).Unix(),
		Mandate: mandate.Grant{PolicySet: `permit(principal, action == Action::"echo", resource);`}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if out, code := cli("call", "echo", "--args", `{"x":1}`, "--mandate", forged, "--creds", creds("admin")); code == 0 || !strings.Contains(out, "auth_failed") {
		t.Fatalf("call with a bad mandate: exit %d\n%s", code, out)
	}
	if out, code := cli("call", "echo", "--args", `{"x":1}`, "--mandate", write("a1.jwt", tok), "--creds", creds("admin")); code != 0 || !strings.Contains(out, "success") {
		t.Fatalf("call with a1's mandate: exit %d\n%s", code, out)
	}
	w.waitLine(t, "executing")

	// On the mesh host a worker of one service finds its seed under
	// ./utpmesh-data/creds without --creds.
	local := exec.Command(utpmeshBin(), "worker", "--nats", url, "--instance", "local-echo", "echo")
	local.Dir, local.Env = cwd, append(os.Environ(), "UTPMESH_TEST_EXEC=1", "NATS_CREDS=")
	lerr, err := local.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := local.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = local.Process.Kill(); _ = local.Wait() })
	sc := bufio.NewScanner(lerr)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "worker serving") {
			return
		}
	}
	t.Fatal("the local worker without --creds did not start serving")
}

func runMandateIssue(t *testing.T, dir, policy string) (string, int) {
	t.Helper()
	var out, errb strings.Builder
	code := runArgs(context.Background(), []string{"mandate", "issue", "--project", "demo", "--agent", "a1", "--policy", policy, "--data", dir}, &out, &errb)
	if code != 0 {
		return errb.String(), code
	}
	return strings.TrimSpace(out.String()), 0
}

// subscribeAudits collects the mesh's audit records (evt.sys.audit.>)
// from now on, in a channel of capacity n.
func subscribeAudits(t *testing.T, nc *nats.Conn, v string, n int) chan audit.Record {
	t.Helper()
	audits := make(chan audit.Record, n)
	ap, _ := subjects.AuditPattern(v)
	if _, err := nc.Subscribe(ap, func(msg *nats.Msg) {
		var r audit.Record
		if json.Unmarshal(msg.Data, &r) == nil {
			audits <- r
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return audits
}
