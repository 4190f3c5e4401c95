package mesh_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cedar-policy/cedar-go/types"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/admit"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/subjects"
)

const (
	admProject = authz.DemoProject
	admChannel = "default"
	admAgent   = authz.DemoAgent
)

// probeTool answers what the runtime knew of the call's admission.
func probeTool(name string, opts registry.Options) worker.Tool {
	return worker.Tool{Name: name, Options: opts, Handler: func(_ context.Context, c *worker.Call) (worker.Result, error) {
		return worker.OK(map[string]any{"admitted": c.Admission != nil, "principal": c.Principal, "mandate": c.Mandate}), nil
	}}
}

// foreignTool is registered but served by no SDK worker: the tests'
// foreign worker is a bare JetStream consumer of its durable.
var foreignTool = worker.Tool{Name: "foreign", Handler: func(context.Context, *worker.Call) (worker.Result, error) { return worker.OK(nil), nil }}

type admEnv struct {
	m    *mesh.Mesh
	dir  string
	demo string // the demo mandate
	ver  string
}

// startAdmissionMesh starts a mesh as 'utpmesh up' does: identities and
// the gate on, the demo policy for probe, ops_only and foreign, and a
// worker identity for the foreign tool.
func startAdmissionMesh(t *testing.T) *admEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet,
		Tools: []worker.Tool{probeTool("probe", registry.Options{}), probeTool("ops_only", registry.Options{Principal: registry.PrincipalOperator})},
		Auth:  &mesh.AuthConfig{},
		Identities: &mesh.IdentityConfig{Workers: []meshauth.Identity{{Role: meshauth.RoleWorker, Service: "foreign",
			Tools: []meshauth.Tool{{Name: "foreign", Target: "foreign"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Stop(sctx)
	})
	if _, err := m.Registry().Put(ctx, foreignTool.Entry(admProject)); err != nil {
		t.Fatal(err)
	}
	actions := []types.EntityUID{authz.AgentUID("x")}[:0]
	for _, n := range []string{"probe", "ops_only", "foreign"} {
		actions = append(actions, types.NewEntityUID(authz.DefaultActionType, types.String(n)))
	}
	if _, err := authz.SetupDemo(ctx, m.Auth().Store, m.Auth().Keys, []string{admProject}, actions, dir, time.Now()); err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(dir, authz.DemoMandateFile))
	if err != nil {
		t.Fatal(err)
	}
	return &admEnv{m: m, dir: dir, demo: strings.TrimSpace(string(tok)), ver: m.Config().ProtocolVersion}
}

// connect connects as the identity named name.
func (e *admEnv) connect(t *testing.T, name string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opt, err := creds.Option(e.m.CredsFile(name))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(e.m.ClientURL(), append(opts, opt)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// agentOn is an agent client of the demo project on nc.
func agentOn(t *testing.T, nc *nats.Conn, mandate string, raw bool) *agent.Client {
	t.Helper()
	c, err := agent.New(nc, agent.Config{Project: admProject, AgentID: admAgent, Mandate: mandate, RawCommands: raw, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func call(t *testing.T, c *agent.Client, tool, turn string) *agent.Outcome {
	t.Helper()
	out, err := c.Call(ctxFor(t), agent.CallRequest{ToolName: tool, AgentTurnID: turn})
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	return out
}

func failedWith(t *testing.T, out *agent.Outcome, code card.ErrorCode, contains string) {
	t.Helper()
	r := out.Result
	if r.Status != card.StatusFailed || r.Error == nil || r.Error.Code != code || !strings.Contains(r.Error.Message+string(r.Error.Detail), contains) {
		t.Fatalf("result = %s %+v, want failed %s containing %q", r.Status, r.Error, code, contains)
	}
}

// TestAdmittedCall: an agent identity's call is admitted: the worker sees
// the admission and the principal, the tool.call card keeps the mandate's
// jti, hash and decision but not the mandate, and a retry of the same
// tool_call_id is the same card and the same result.
func TestAdmittedCall(t *testing.T) {
	e := startAdmissionMesh(t)
	c := agentOn(t, e.connect(t, creds.AgentName(admProject)), e.demo, false)
	out := call(t, c, "probe", "turn-admitted")
	var v struct {
		Admitted  bool   `json:"admitted"`
		Principal string `json:"principal"`
		Mandate   string `json:"mandate"`
	}
	if out.Result.Status != card.StatusSuccess || json.Unmarshal(out.Result.Result, &v) != nil || !v.Admitted || v.Principal != "agent:"+admAgent {
		t.Fatalf("result = %s %s, want success, admitted, principal agent:%s", out.Result.Status, out.Result.Result, admAgent)
	}
	// The tool gets the verified mandate from the command (CG-Mandate),
	// not from the card.
	if v.Mandate != e.demo {
		t.Fatalf("the tool saw mandate %q, want the demo mandate", v.Mandate)
	}
	cc, err := e.m.Cards().Get(context.Background(), admProject, out.Call.ToolCallCardID)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mandate.Decode(e.demo)
	if err != nil {
		t.Fatal(err)
	}
	x := cc.Metadata.Extra
	if _, ok := x[authz.MetadataMandate]; ok || strings.Contains(string(cc.Content), e.demo) {
		t.Fatalf("the tool.call card carries the mandate: %s", x[authz.MetadataMandate])
	}
	var jti, sum string
	var dec admit.Summary
	_ = json.Unmarshal(x[admit.MetadataMandateJTI], &jti)
	_ = json.Unmarshal(x[admit.MetadataMandateSHA256], &sum)
	_ = json.Unmarshal(x[admit.MetadataAdmission], &dec)
	if jti != m.Claims.JTI || len(sum) != 64 || dec.Decision != authz.DecisionAllow || dec.Principal != "agent:"+admAgent || dec.KeyID != e.m.Admission().KeyID() {
		t.Fatalf("card metadata: jti %q sha %q decision %+v", jti, sum, dec)
	}

	again, err := c.Call(ctxFor(t), agent.CallRequest{ToolName: "probe", AgentTurnID: "turn-admitted", ToolCallID: out.Call.ToolCallID})
	if err != nil {
		t.Fatal(err)
	}
	if again.Call.ToolCallCardID != out.Call.ToolCallCardID || again.ResultCard.CardID != out.ResultCard.CardID {
		t.Fatalf("retry: card %s result %s, want %s and %s", again.Call.ToolCallCardID, again.ResultCard.CardID, out.Call.ToolCallCardID, out.ResultCard.CardID)
	}
}

// TestAdmissionRefusals: what admission refuses reaches the agent as an
// auth_failed result (the gate's detail), or as an error when the request
// itself is wrong; nothing is published to a worker.
func TestAdmissionRefusals(t *testing.T) {
	e := startAdmissionMesh(t)
	nc := e.connect(t, creds.AgentName(admProject))
	other := e.issue(t, "another-agent", `permit(principal, action, resource);`)
	narrow := e.issue(t, admAgent, `permit(principal, action == Action::"foreign", resource);`)
	for _, tc := range []struct {
		name, mandate, tool string
		code                card.ErrorCode
		contains            string
	}{
		{"no mandate", "", "probe", card.CodeAuthFailed, authz.ReasonMandateMissing},
		{"forged mandate", "eyJhbGciOiJFZERTQSJ9.e30.AAAA", "probe", card.CodeAuthFailed, authz.ReasonMandateInvalid},
		{"another agent's mandate", other, "probe", card.CodeAuthFailed, authz.ReasonSubjectMismatch},
		{"mandate without the tool", narrow, "probe", card.CodeAuthFailed, authz.ReasonScopeViolation},
		{"operator-only tool", e.demo, "ops_only", card.CodeAuthFailed, authz.ReasonOperatorOnly},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := call(t, agentOn(t, nc, tc.mandate, false), tc.tool, "turn-refused-"+strings.ReplaceAll(tc.name, " ", "-"))
			failedWith(t, out, tc.code, tc.contains)
			if out.ResultCard.AuthorID != admit.AuthorID {
				t.Errorf("result author %q, want %q: the mesh refused it, no worker ran", out.ResultCard.AuthorID, admit.AuthorID)
			}
		})
	}

	// A request whose agent_id is not the subject's agent is forbidden.
	req := utp.DispatchRequest{AgentID: "someone-else", AgentTurnID: "t", ToolCallID: "c", StepID: "s", ToolName: "probe",
		Traceparent: utp.NewTraceparent(), Mandate: e.demo}
	subj, _ := subjects.Dispatch(e.ver, admProject, admChannel, admAgent)
	err := svc.Call(ctxFor(t), nc, subj.String(), admit.Codes, req, nil)
	if !errors.Is(err, admit.ErrForbidden) || !strings.Contains(err.Error(), "svc.dispatch.call.someone-else") {
		t.Fatalf("dispatch with another agent_id: %v, want forbidden naming the right subject", err)
	}
	// Bad input is a bad_request naming the field.
	req.AgentID, req.Traceparent = admAgent, "nope"
	if err := svc.Call(ctxFor(t), nc, subj.String(), admit.Codes, req, nil); !errors.Is(err, admit.ErrInvalid) || !strings.Contains(err.Error(), "traceparent") {
		t.Fatalf("dispatch with a bad traceparent: %v", err)
	}
	// An unknown tool is not_found.
	if _, err := agentOn(t, nc, e.demo, false).Dispatch(ctxFor(t), agent.CallRequest{ToolName: "nope", AgentTurnID: "t"}); !errors.Is(err, agent.ErrUnknownTool) {
		t.Fatalf("unknown tool: %v", err)
	}
}

// TestOperatorDispatch: an operator's call of an operator-only tool is
// admitted with principal operator:<name> and no mandate, made as the
// agent id op-<name> (whose wakeup it gets); an operator may not make
// calls as another agent id, an agent may not use an op- agent id nor
// re-dispatch the operator's call as its own.
func TestOperatorDispatch(t *testing.T) {
	e := startAdmissionMesh(t)
	ctx := ctxFor(t)
	nc := e.m.Conn()
	opAgent := utp.OperatorAgentID("alice")
	wake, _ := subjects.AgentWakeup(e.ver, admProject, admChannel, opAgent)
	sub, err := nc.SubscribeSync(wake.String())
	if err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	subj, _ := subjects.OperatorDispatch(e.ver, admProject, admChannel, "alice")
	req := utp.DispatchRequest{AgentID: admAgent, AgentTurnID: "turn-op", ToolCallID: "op-1", StepID: "s-1", ToolName: "ops_only",
		Traceparent: utp.NewTraceparent()}
	var reply utp.DispatchReply
	if err := svc.Call(ctx, nc, subj.String(), admit.Codes, req, &reply); !errors.Is(err, admit.ErrForbidden) || !strings.Contains(err.Error(), `made as agent_id "op-alice"`) {
		t.Fatalf("operator call as agent %s: %v, want forbidden naming op-alice", admAgent, err)
	}
	req.AgentID = opAgent
	if err := svc.Call(ctx, nc, subj.String(), admit.Codes, req, &reply); err != nil {
		t.Fatal(err)
	}
	if !reply.Admitted {
		t.Fatalf("operator call refused: %+v", reply.Error)
	}
	var w utp.Wakeup
	for w.ToolCallID != "op-1" {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal(m.Data, &w)
	}
	rc, err := e.m.Cards().Get(ctx, admProject, w.ToolResultCardID)
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := rc.ToolResult()
	var v struct {
		Principal string `json:"principal"`
	}
	if tr.Status != card.StatusSuccess || json.Unmarshal(tr.Result, &v) != nil || v.Principal != "operator:alice" {
		t.Fatalf("operator call result %s %s", tr.Status, tr.Result)
	}
	c := agentOn(t, nc, e.demo, false)
	if _, err := c.Dispatch(ctx, agent.CallRequest{ToolName: "ops_only", AgentTurnID: "turn-op", ToolCallID: "op-1"}); err == nil ||
		!strings.Contains(err.Error(), "dispatched before") {
		t.Fatalf("agent re-dispatch of the operator's call: %v, want a conflict", err)
	}
	as, _ := subjects.Dispatch(e.ver, admProject, admChannel, opAgent)
	req.ToolCallID, req.ToolName = "op-2", "probe"
	if err := svc.Call(ctx, nc, as.String(), admit.Codes, req, &reply); !errors.Is(err, admit.ErrForbidden) || !strings.Contains(err.Error(), "are the operators'") {
		t.Fatalf("agent call as %s: %v, want forbidden", opAgent, err)
	}
}

// TestForeignWorkerSeesOnlyAdmitted: a foreign worker that is a bare
// nats.go consumer of its tool's durable, with no gate code, receives
// the admitted command (whose CG-Admission it verifies with the keys of
// svc.dispatch.keys) and not the refused one; an agent's raw publish is
// refused by NATS; a raw command the admin publishes has no CG-Admission,
// which the foreign worker can tell, and the SDK workers fail such
// commands without running them.
func TestForeignWorkerSeesOnlyAdmitted(t *testing.T) {
	e := startAdmissionMesh(t)
	ctx := ctxFor(t)
	wnc := e.connect(t, "worker-foreign")
	js, err := jetstream.New(wnc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, streams.CommandStream(e.ver), jetstream.ConsumerConfig{
		Durable: streams.ToolConsumer("foreign"), FilterSubject: "cg." + e.ver + ".*.*.cmd.tool.foreign", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	var keys utp.AdmissionKeysReply
	ks, _ := subjects.DispatchKeys(e.ver, admProject, admChannel)
	if err := svc.Call(ctx, wnc, ks.String(), nil, struct{}{}, &keys); err != nil {
		t.Fatal(err)
	}
	if keys.Commands != string(authz.CommandsAdmitted) || len(keys.Keys) != 1 || keys.Keys[0].KeyID != e.m.Admission().KeyID() {
		t.Fatalf("keys = %+v", keys)
	}
	pub, _ := base64.RawURLEncoding.DecodeString(keys.Keys[0].PublicKey)
	keyOf := func(kid string) (ed25519.PublicKey, error) {
		if kid != keys.Keys[0].KeyID {
			return nil, errors.New("unknown kid")
		}
		return pub, nil
	}
	next := func() jetstream.Msg {
		t.Helper()
		m, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		_ = m.Ack()
		return m
	}

	anc := e.connect(t, creds.AgentName(admProject))
	// Refused by admission: never published.
	if _, err := agentOn(t, anc, "", false).Dispatch(ctx, agent.CallRequest{ToolName: "foreign", AgentTurnID: "turn-f", ToolCallID: "refused"}); err != nil {
		t.Fatal(err)
	}
	// Admitted.
	if _, err := agentOn(t, anc, e.demo, false).Dispatch(ctx, agent.CallRequest{ToolName: "foreign", AgentTurnID: "turn-f", ToolCallID: "admitted"}); err != nil {
		t.Fatal(err)
	}
	m := next()
	cmd, err := utp.ParseCommand(m.Data(), m.Headers(), admProject, admChannel, false)
	if err != nil {
		t.Fatal(err)
	}
	a, err := utp.VerifyAdmission(keyOf, m.Headers().Get(utp.HeaderAdmission), m.Subject(), cmd)
	if err != nil || cmd.ToolCallID != "admitted" || a.Principal != "agent:"+admAgent {
		t.Fatalf("first command the foreign worker got: %s (%v), want the admitted one", cmd.ToolCallID, err)
	}

	// An agent cannot publish a raw command: NATS refuses it.
	perm := make(chan error, 4)
	rnc := e.connect(t, creds.AgentName(admProject), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { perm <- err }))
	target := "cg." + e.ver + "." + admProject + "." + admChannel + ".cmd.tool.foreign"
	if err := rnc.Publish(target, m.Data()); err != nil {
		t.Fatal(err)
	}
	_ = rnc.Flush()
	if err := <-perm; !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("agent raw publish: %v, want a permissions violation", err)
	}

	// The admin may publish raw commands: the foreign worker sees no
	// admission on them.
	raw := agentOn(t, e.m.Conn(), e.demo, true)
	if _, err := raw.Dispatch(ctx, agent.CallRequest{ToolName: "foreign", AgentTurnID: "turn-f", ToolCallID: "raw"}); err != nil {
		t.Fatal(err)
	}
	m = next()
	if cmd, err = utp.ParseCommand(m.Data(), m.Headers(), admProject, admChannel, false); err != nil || cmd.ToolCallID != "raw" {
		t.Fatalf("next command: %v %v", cmd, err)
	}
	if _, err := utp.VerifyAdmission(keyOf, m.Headers().Get(utp.HeaderAdmission), m.Subject(), cmd); !errors.Is(err, utp.ErrAdmission) {
		t.Fatalf("raw command verifies: %v", err)
	}
	// An SDK worker fails it without running the tool.
	out := call(t, raw, "probe", "turn-raw")
	failedWith(t, out, card.CodeAuthFailed, "not admitted by the mesh")
}

// TestForgedAdmissions: the SDK worker refuses a command whose
// CG-Admission is signed by an unknown key, was made for another call,
// another subject or another card content.
func TestForgedAdmissions(t *testing.T) {
	e := startAdmissionMesh(t)
	key, err := admit.LoadOrCreateKey(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	_, evil, _ := ed25519.GenerateKey(rand.Reader)
	nc := e.m.Conn()
	js, _ := jetstream.New(nc)
	target := "cg." + e.ver + "." + admProject + "." + admChannel + ".cmd.tool.probe"
	for _, tc := range []struct {
		name   string
		change func(a *utp.Admission)
		sign   func(a utp.Admission) (string, error)
	}{
		{"unknown key", nil, func(a utp.Admission) (string, error) { a.KeyID = "AAAAAAAAAAAAAAAA"; return utp.SignAdmission(evil, a) }},
		{"another call", func(a *utp.Admission) { a.ToolCallID = "other" }, nil},
		{"another subject", func(a *utp.Admission) { a.Subject = strings.Replace(target, "probe", "ops_only", 1) }, nil},
		{"another card", func(a *utp.Admission) {
			a.CardSHA256 = utp.ContentSHA256([]byte(`{"tool_name":"probe","arguments":{"x":1}}`))
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t)
			turn, id := "turn-forged", strings.ReplaceAll(tc.name, " ", "-")
			content, _ := json.Marshal(card.ToolCallContent{ToolName: "probe", Arguments: json.RawMessage(`{}`), TargetSubject: target})
			cc := &card.Card{CardID: card.NewID(), ProjectID: admProject, Type: card.TypeToolCall, AuthorID: admAgent, Content: content,
				ToolCallID: id, CreatedAt: time.Now().UTC(), Metadata: card.Metadata{AgentID: admAgent, AgentTurnID: turn, ToolCallID: id, StepID: "s"}}
			if err := e.m.Cards().Put(ctx, cc); err != nil {
				t.Fatal(err)
			}
			cmd := utp.Command{AgentID: admAgent, AgentTurnID: turn, ToolCallID: id, AfterExecution: card.Suspend, ToolCallCardID: cc.CardID, StepID: "s", ToolName: "probe"}
			a := utp.Admission{Subject: target, AgentID: admAgent, AgentTurnID: turn, ToolCallID: id, ToolCallCardID: cc.CardID, ToolName: "probe",
				AfterExecution: card.Suspend, Principal: "agent:" + admAgent, CardSHA256: utp.ContentSHA256(content), IssuedAt: time.Now().UnixMilli()}
			if tc.change != nil {
				tc.change(&a)
			}
			sign := tc.sign
			if sign == nil {
				sign = func(a utp.Admission) (string, error) { return key.Sign(a) }
			}
			hdr, err := sign(a)
			if err != nil {
				t.Fatal(err)
			}
			wake, _ := subjects.AgentWakeup(e.ver, admProject, admChannel, admAgent)
			sub, err := nc.SubscribeSync(wake.String())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = sub.Unsubscribe() }()
			_ = nc.Flush()
			msg := nats.NewMsg(target)
			msg.Data, _ = json.Marshal(cmd)
			msg.Header.Set(utp.HeaderAdmission, hdr)
			if _, err := js.PublishMsg(ctx, msg); err != nil {
				t.Fatal(err)
			}
			for {
				wm, err := sub.NextMsgWithContext(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var w utp.Wakeup
				if json.Unmarshal(wm.Data, &w) != nil || w.ToolCallID != id {
					continue
				}
				rc, err := e.m.Cards().Get(ctx, admProject, w.ToolResultCardID)
				if err != nil {
					t.Fatal(err)
				}
				tr, _ := rc.ToolResult()
				if tr.Status != card.StatusFailed || tr.Error == nil || tr.Error.Code != card.CodeAuthFailed || !strings.Contains(tr.Error.Message, "not admitted") {
					t.Fatalf("result %s %+v, want failed auth_failed: not admitted", tr.Status, tr.Error)
				}
				return
			}
		})
	}
}

// TestRawProject: a project whose operator opted into raw commands takes
// them: the card carries the mandate, and the SDK worker runs the full
// gate on them (allowing the demo mandate, refusing a call without one).
func TestRawProject(t *testing.T) {
	e := startAdmissionMesh(t)
	ctx := ctxFor(t)
	if err := e.m.Auth().Store.PutConfig(ctx, admProject, authz.ProjectConfig{Commands: authz.CommandsRaw}); err != nil {
		t.Fatal(err)
	}
	out := call(t, agentOn(t, e.m.Conn(), e.demo, true), "probe", "turn-raw-ok")
	var v struct {
		Admitted bool `json:"admitted"`
	}
	if out.Result.Status != card.StatusSuccess || json.Unmarshal(out.Result.Result, &v) != nil || v.Admitted {
		t.Fatalf("raw call with the demo mandate: %s %s %+v", out.Result.Status, out.Result.Result, out.Result.Error)
	}
	failedWith(t, call(t, agentOn(t, e.m.Conn(), "", true), "probe", "turn-raw-denied"), card.CodeAuthFailed, authz.ReasonMandateMissing)
	// Dispatched calls are admitted as in any project.
	out = call(t, agentOn(t, e.m.Conn(), e.demo, false), "probe", "turn-raw-dispatched")
	if json.Unmarshal(out.Result.Result, &v) != nil || !v.Admitted {
		t.Fatalf("dispatched call in a raw project: %s", out.Result.Result)
	}
}

func (e *admEnv) issue(t *testing.T, agentID, policies string) string {
	t.Helper()
	key, err := e.m.Auth().Keys.Load(context.Background(), admProject)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := mandate.Issue(key, mandate.Claims{Subject: agentID, ExpiresAt: time.Now().Add(time.Hour).Unix(),
		Mandate: mandate.Grant{PolicySet: policies}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
