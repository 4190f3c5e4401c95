// Package cynodetest runs the cynode service in a real in-process mesh for
// tests: mesh.Start with the service's tools, an issuer key for the test
// project, and one agent client per registered agent (each with its own
// signed mandate), making real calls and reading the result cards.
package cynodetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/cynode"
	"github.com/utpmesh/utpmesh/services/cynode/audit"
	"github.com/utpmesh/utpmesh/services/cynode/internal/egress"
	"github.com/utpmesh/utpmesh/subjects"
)

// Project is the project of the calls; Other is another project.
const (
	Project = "demo"
	Other   = "other"
)

// Agents of the default configuration.
const (
	PMAgent      = "pm-agent"
	PAAgent      = "pa-agent"
	SandboxAgent = "sb-agent"
	// Unregistered has a valid mandate but no registered agent type.
	Unregistered = "ghost-agent"
)

// Quiet discards logs.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Config is the default test configuration: one agent of each type, a
// permit-all access policy.
func Config() *cynode.Config {
	return &cynode.Config{
		Agents: map[string]cynode.Agent{
			PMAgent:      {Type: cynode.PM},
			PAAgent:      {Type: cynode.PA, User: "alice", Groups: []string{"eng"}, Roles: []string{"analyst"}, Projects: []string{Project, "p-shared"}},
			SandboxAgent: {Type: cynode.Sandbox, User: "alice"},
		},
		AccessPolicies: `permit(principal, action == Action::"mcp.tool.invoke", resource);`,
	}
}

// Harness is a running mesh serving the cynode tools.
type Harness struct {
	T       testing.TB
	Mesh    *mesh.Mesh
	Service *cynode.Service
	Key     *mandate.IssuerKey
	// DataDir is the service's and the mesh's data directory.
	DataDir string
	agents  map[string]*agent.Client
	mu      sync.Mutex
	seq     atomic.Int64
}

// Start starts a mesh in a temporary directory with cfg (Config() when
// nil); it stops when the test ends.
func Start(t testing.TB, cfg *cynode.Config) *Harness {
	t.Helper()
	return StartEgress(t, cfg, nil)
}

// StartEgress is Start with test egress hooks (local servers, made-up
// host names) for the web tools.
func StartEgress(t testing.TB, cfg *cynode.Config, hooks *egress.Hooks) *Harness {
	t.Helper()
	if cfg == nil {
		cfg = Config()
	}
	dir := t.TempDir()
	key, err := mandate.GenerateKey(Project)
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan *nats.Conn, 1)
	var once sync.Once
	var nc *nats.Conn
	resolve := func(ctx context.Context) (*nats.Conn, error) {
		once.Do(func() { nc = <-ready })
		return nc, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := cynode.Open(cynode.Deps{Resolve: resolve, DataDir: dir, Config: cfg, Keys: mandate.StaticKeys{key}, Context: ctx, Logger: Quiet, TestEgress: hooks})
	if err != nil {
		cancel()
		t.Fatalf("cynode: %v", err)
	}
	m, err := mesh.Start(context.Background(), mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Tools: svc.Tools(), Logger: Quiet})
	if err != nil {
		cancel()
		t.Fatalf("mesh: %v", err)
	}
	ready <- m.Conn()
	h := &Harness{T: t, Mesh: m, Service: svc, Key: key, DataDir: dir, agents: map[string]*agent.Client{}}
	t.Cleanup(func() {
		h.mu.Lock()
		for _, a := range h.agents {
			_ = a.Close()
		}
		h.mu.Unlock()
		sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer scancel()
		_ = m.Stop(sctx)
		cancel()
		_ = svc.Close()
	})
	return h
}

// Mandate issues a mandate of the test project for agentID.
func (h *Harness) Mandate(agentID string) string {
	h.T.Helper()
	tok, err := mandate.Issue(h.Key, mandate.Claims{Subject: agentID, ExpiresAt: time.Now().Add(time.Hour).Unix(),
		Mandate: mandate.Grant{PolicySet: `permit(principal, action == Action::"mcp.tool.invoke", resource);`}}, time.Now())
	if err != nil {
		h.T.Fatal(err)
	}
	return tok
}

// Agent returns the client of agentID (with its mandate; "" token for
// NoMandate).
func (h *Harness) Agent(agentID string) *agent.Client {
	h.T.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if a, ok := h.agents[agentID]; ok {
		return a
	}
	tok := ""
	if agentID != NoMandate {
		tok = h.Mandate(agentID)
	}
	a, err := agent.New(h.Mesh.Conn(), agent.Config{Project: Project, AgentID: agentID, Mandate: tok, Logger: Quiet})
	if err != nil {
		h.T.Fatal(err)
	}
	h.agents[agentID] = a
	return a
}

// NoMandate is an agent id whose client sends no mandate.
const NoMandate = "no-mandate-agent"

// Result is one finished call.
type Result struct {
	Status card.Status
	// Envelope is the seed's response model: the result of a success, the
	// error detail of a failure.
	Envelope map[string]any
	Error    *card.Error
	Raw      json.RawMessage
	// ToolCallID identifies the call.
	ToolCallID string
}

// Value is the envelope's result object.
func (r *Result) Value() map[string]any { m, _ := r.Envelope["result"].(map[string]any); return m }

// ErrorType is the envelope's error.type.
func (r *Result) ErrorType() string { return Str(r.Envelope, "error", "type") }

// Call makes a call as agentID and waits for its result card.
func (h *Harness) Call(agentID, tool string, args any) *Result {
	h.T.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		h.T.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := fmt.Sprintf("call-%d", h.seq.Add(1))
	out, err := h.Agent(agentID).Call(ctx, agent.CallRequest{ToolName: tool, Arguments: raw, AgentTurnID: "turn-" + agentID, ToolCallID: id})
	if err != nil {
		h.T.Fatalf("%s: %v", tool, err)
	}
	r := &Result{Status: out.Result.Status, Error: out.Result.Error, Raw: out.Result.Result, ToolCallID: id}
	switch {
	case r.Status == card.StatusSuccess:
		if err := json.Unmarshal(out.Result.Result, &r.Envelope); err != nil {
			h.T.Fatalf("%s: result %s: %v", tool, out.Result.Result, err)
		}
	case r.Error != nil && len(r.Error.Detail) > 0:
		_ = json.Unmarshal(r.Error.Detail, &r.Envelope)
	}
	return r
}

// OK makes a call that must succeed and returns the envelope's result.
func (h *Harness) OK(agentID, tool string, args any) map[string]any {
	h.T.Helper()
	r := h.Call(agentID, tool, args)
	if r.Status != card.StatusSuccess || Str(r.Envelope, "status") != "success" {
		h.T.Fatalf("%s as %s (%v): status %s, error %+v", tool, agentID, args, r.Status, r.Error)
	}
	return r.Value()
}

// Fail makes a call that must fail with the envelope error type typ and
// returns the message.
func (h *Harness) Fail(agentID, tool string, args any, typ string) string {
	h.T.Helper()
	r := h.Call(agentID, tool, args)
	if r.Status != card.StatusFailed || r.ErrorType() != typ || Str(r.Envelope, "status") != "error" {
		h.T.Fatalf("%s as %s (%v): status %s, error %+v, envelope %v; want failed with error type %s", tool, agentID, args, r.Status, r.Error, r.Envelope, typ)
	}
	return Str(r.Envelope, "error", "message")
}

// Audit lists the project's audit records.
func (h *Harness) Audit(f audit.Filter) []audit.Record {
	h.T.Helper()
	js, err := jetstream.New(h.Mesh.Conn())
	if err != nil {
		h.T.Fatal(err)
	}
	if f.Project == "" {
		f.Project = Project
	}
	recs, err := audit.List(context.Background(), js, subjects.DefaultVersion, f)
	if err != nil {
		h.T.Fatal(err)
	}
	return recs
}

// Get walks a decoded JSON value by keys and indexes ("a", 0, "b").
var Get = meshtest.JSONGet

// Str is Get as a string.
var Str = meshtest.JSONStr

// AuditRaw returns the stored audit messages of the project, as stored,
// joined by newlines (to look for what must not be there).
func (h *Harness) AuditRaw() string {
	h.T.Helper()
	js, err := jetstream.New(h.Mesh.Conn())
	if err != nil {
		h.T.Fatal(err)
	}
	pat, err := audit.Pattern(subjects.DefaultVersion, Project)
	if err != nil {
		h.T.Fatal(err)
	}
	ctx := context.Background()
	stream, err := js.Stream(ctx, "cg_evt_"+subjects.DefaultVersion)
	if err != nil {
		h.T.Fatal(err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{pat}})
	if err != nil {
		h.T.Fatal(err)
	}
	var b []byte
	for {
		msgs, err := cons.FetchNoWait(100)
		if err != nil {
			h.T.Fatal(err)
		}
		n := 0
		for m := range msgs.Messages() {
			n++
			b = append(append(b, m.Data()...), '\n')
		}
		if n == 0 {
			return string(b)
		}
	}
}

// OperatorCall makes a call as the operator name: Admitted with the
// principal operator:<name>. The mesh's admission service (issue 23,
// branch admit) dispatches operators' calls; until the harness's mesh
// runs it, this is how a test makes an operator's call. Agents' calls
// always go through the mesh (Call).
func (h *Harness) OperatorCall(name, tool string, args any) *Result {
	h.T.Helper()
	principal := utp.PrincipalOperator + ":" + name
	return h.Admitted(name, &utp.Admission{Principal: principal}, principal, tool, args)
}

// Admitted runs the tool's handler in this process exactly as the worker
// runtime runs a call of agentID that the mesh admitted with adm
// (worker.Call.Admission, completed with the call's routing fields) and
// the principal principal (worker.Call.Principal); the tool.call card and
// its mandate are absent, as in an admitted call.
func (h *Harness) Admitted(agentID string, adm *utp.Admission, principal, tool string, args any) *Result {
	h.T.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		h.T.Fatal(err)
	}
	var handler worker.HandlerFunc
	for _, tl := range h.Service.Tools() {
		if tl.Name == tool {
			handler = tl.Handler
		}
	}
	if handler == nil {
		h.T.Fatalf("no tool %s", tool)
	}
	id := fmt.Sprintf("call-%d", h.seq.Add(1))
	cmd := utp.Command{AgentID: agentID, AgentTurnID: "turn-admitted-" + agentID, ToolCallID: id, AfterExecution: card.Suspend, ToolCallCardID: card.NewID(), ToolName: tool}
	if adm != nil {
		a := *adm
		a.V, a.AgentID, a.AgentTurnID, a.ToolCallID, a.ToolCallCardID, a.ToolName, a.AfterExecution = utp.AdmissionVersion, cmd.AgentID, cmd.AgentTurnID, id, cmd.ToolCallCardID, tool, cmd.AfterExecution
		adm = &a
	}
	c := &worker.Call{Version: "v1r3", ProjectID: Project, ChannelID: "main", ToolName: tool, Command: cmd, Arguments: raw, Delivery: 1,
		Principal: principal, Admission: adm}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := handler(ctx, c)
	r := &Result{Status: card.StatusSuccess, ToolCallID: id}
	var ce *card.Error
	switch {
	case errors.As(err, &ce):
		r.Status, r.Error = card.StatusFailed, ce
		_ = json.Unmarshal(ce.Detail, &r.Envelope)
	case err != nil:
		h.T.Fatalf("%s as %s: %v", tool, principal, err)
	default:
		r.Raw, _ = res.Value.(json.RawMessage)
		if err := json.Unmarshal(r.Raw, &r.Envelope); err != nil {
			h.T.Fatalf("%s: result %s: %v", tool, r.Raw, err)
		}
	}
	return r
}

// OperatorOK is OperatorCall of a call that must succeed; it returns the
// envelope's result.
func (h *Harness) OperatorOK(name, tool string, args any) map[string]any {
	h.T.Helper()
	r := h.OperatorCall(name, tool, args)
	if r.Status != card.StatusSuccess || Str(r.Envelope, "status") != "success" {
		h.T.Fatalf("%s as operator %s (%v): status %s, error %+v", tool, name, args, r.Status, r.Error)
	}
	return r.Value()
}

// OperatorFail is OperatorCall of a call that must fail with the envelope
// error type typ; it returns the message.
func (h *Harness) OperatorFail(name, tool string, args any, typ string) string {
	h.T.Helper()
	r := h.OperatorCall(name, tool, args)
	if r.Status != card.StatusFailed || r.ErrorType() != typ {
		h.T.Fatalf("%s as operator %s (%v): status %s, error %+v; want failed with error type %s", tool, name, args, r.Status, r.Error, typ)
	}
	return Str(r.Envelope, "error", "message")
}
