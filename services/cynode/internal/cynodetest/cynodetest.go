// Package cynodetest runs the cynode service in a real in-process mesh for
// tests: mesh.Start with the service's tools, an issuer key for the test
// project, and one agent client per registered agent (each with its own
// signed mandate), making real calls and reading the result cards.
// Direct runs one tool package's specs straight on a gateway.Exec over a
// real bbolt store, for that package's own tests.
package cynodetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

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
	"github.com/utpmesh/utpmesh/services/toolkit"
	"github.com/utpmesh/utpmesh/services/toolkit/tooltest"
	"github.com/utpmesh/utpmesh/subjects"
)

// Project is the project of the calls; Other is another project.
const (
	Project = tooltest.Project
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
var Quiet = tooltest.Quiet

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
	base    *tooltest.Harness

	mu       sync.Mutex
	mandates map[string]string
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
	late := toolkit.NewLate()
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := cynode.Open(cynode.Deps{Resolve: late.Conn, StateReplicas: 1, DataDir: dir, Config: cfg, Keys: mandate.StaticKeys{key}, Context: ctx, Logger: Quiet, TestEgress: hooks})
	if err != nil {
		cancel()
		t.Fatalf("cynode: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = svc.Close()
	})
	base := tooltest.Start(t, mesh.Config{DataDir: dir, Tools: svc.Tools()})
	late.Set(base.Mesh.Conn(), base.Mesh.Cards())
	return &Harness{T: t, Mesh: base.Mesh, Service: svc, Key: key, DataDir: dir, base: base, mandates: map[string]string{}}
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
	tok := ""
	if agentID != NoMandate {
		if tok = h.mandates[agentID]; tok == "" {
			tok = h.Mandate(agentID)
			h.mandates[agentID] = tok
		}
	}
	return h.base.Agent(agentID, tok)
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
	id := fmt.Sprintf("call-%d", h.base.Next())
	b := h.base.Call(h.Agent(agentID), agent.CallRequest{ToolName: tool, Arguments: h.base.Args(args), AgentTurnID: "turn-" + agentID, ToolCallID: id})
	return h.result(tool, b)
}

// result decodes a call's envelope: the result of a success, the error
// detail of a failure.
func (h *Harness) result(tool string, b *tooltest.Result) *Result {
	h.T.Helper()
	r := &Result{Status: b.Status, Error: b.Error, Raw: b.Raw, ToolCallID: b.ToolCallID}
	switch {
	case r.Status == card.StatusSuccess:
		if err := json.Unmarshal(r.Raw, &r.Envelope); err != nil {
			h.T.Fatalf("%s: result %s: %v", tool, r.Raw, err)
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

// RefusedOperatorOnly calls tool as agentID and fails the test unless the
// mesh's admission refused it as an operator-only tool (auth_failed,
// reason operator_only): the worker never sees the call. It returns the
// error message.
func (h *Harness) RefusedOperatorOnly(agentID, tool string, args any) string {
	h.T.Helper()
	r := h.Call(agentID, tool, args)
	if r.Status != card.StatusFailed || r.Error == nil || r.Error.Code != card.CodeAuthFailed || Str(r.Envelope, "reason") != "operator_only" {
		h.T.Fatalf("%s as %s (%v): status %s, error %+v, envelope %v; want auth_failed operator_only from the admission", tool, agentID, args, r.Status, r.Error, r.Envelope)
	}
	return r.Error.Message
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
// its mandate are absent, as in an admitted call (tooltest.Admitted).
func (h *Harness) Admitted(agentID string, adm *utp.Admission, principal, tool string, args any) *Result {
	h.T.Helper()
	return h.AdmittedOn(h.Service.Tools(), agentID, adm, principal, tool, args)
}

// AdmittedOn is Admitted on tools, another worker's (a second cynode
// service of the test): the call as that worker runs it when it takes it.
func (h *Harness) AdmittedOn(tools []worker.Tool, agentID string, adm *utp.Admission, principal, tool string, args any) *Result {
	h.T.Helper()
	b := h.base.Admitted(tools, tool, tooltest.Admit{AgentID: agentID, Turn: "turn-admitted-" + agentID,
		ToolCallID: fmt.Sprintf("call-%d", h.base.Next()), Principal: principal, Admission: adm, Args: h.base.Args(args)})
	if b.Error != nil && b.Error.Code == card.CodeInternalError && len(b.Error.Detail) == 0 {
		h.T.Fatalf("%s as %s: %s", tool, principal, b.Error.Message)
	}
	return h.result(tool, b)
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
