// Package atptest runs the ATP service in a real in-process mesh with the
// Cedar gate on, for tests: the gate reads booking states from the
// service, the project has a policy set permitting every ATP tool, and
// Agent makes calls under a mandate the test chooses.
package atptest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cedar-policy/cedar-go/types"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/atpauthz"
	"github.com/utpmesh/utpmesh/services/atp/hem"
	"github.com/utpmesh/utpmesh/services/atp/octo"
	"github.com/utpmesh/utpmesh/services/atp/rails"
	"github.com/utpmesh/utpmesh/services/atp/ratelimit"
	"github.com/utpmesh/utpmesh/services/atp/tools"
	"github.com/utpmesh/utpmesh/services/toolkit/tooltest"
)

// Project is the project of the harness.
const Project = tooltest.Project

// Quiet discards logs.
var Quiet = tooltest.Quiet

// Clock is an injectable clock.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Add advances the clock.
func (c *Clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// Harness is a running mesh with the ATP service.
type Harness struct {
	T        testing.TB
	Mesh     *mesh.Mesh
	Service  *tools.Service
	Clock    *Clock
	DataDir  string
	base     *tooltest.Harness
	stopOnce sync.Once
}

// Options tune Start.
type Options struct {
	Notifiers map[string]atp.Notifier
	// ProjectPolicy replaces the default project policy (every tool the
	// service serves, invoke_hem for HEM-MANDATE-01).
	ProjectPolicy string
	// Clock is the service's clock (kept across restarts); default now.
	Clock *Clock
	// HEMCatalogue replaces hem.Default().
	HEMCatalogue *hem.Catalogue
	// ContentRules replaces the default Rail 2 rules.
	ContentRules func(project string) []rails.ContentRule
	// OCTOSuppliers are bridged into atp_search_activities.
	OCTOSuppliers []*octo.Supplier
	// RateLimits replaces the default limits.
	RateLimits func(project string) ratelimit.Limits
}

// NewClock returns a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Start starts the mesh in a temporary directory.
func Start(t testing.TB, opt Options) *Harness {
	t.Helper()
	return StartIn(t, t.TempDir(), opt)
}

// StartIn is Start on a given data directory (restart tests: Stop the
// first harness, then StartIn the same directory).
func StartIn(t testing.TB, dir string, opt Options) *Harness {
	t.Helper()
	if opt.Clock == nil {
		opt.Clock = &Clock{t: time.Now().UTC()}
	}
	h := &Harness{T: t, DataDir: dir, Clock: opt.Clock}
	h.base = tooltest.Start(t, mesh.Config{DataDir: dir,
		Auth: &mesh.AuthConfig{Catalogues: []authz.Catalogue{atpauthz.New(atp.StatesFor(dir))}},
		Services: func(ctx context.Context, m *mesh.Mesh) ([]worker.Tool, error) {
			s, err := tools.Open(atp.Deps{NC: m.Conn(), Cards: m.Cards(), DataDir: dir, Context: ctx, Now: h.Clock.Now, TickEvery: -1, Notifiers: opt.Notifiers, HEMCatalogue: opt.HEMCatalogue, RateLimits: opt.RateLimits, ContentRules: opt.ContentRules, OCTOSuppliers: opt.OCTOSuppliers, Logger: Quiet})
			if err != nil {
				return nil, err
			}
			h.Service = s
			return s.Tools()
		}})
	m := h.base.Mesh
	h.Mesh = m
	t.Cleanup(h.Stop)
	pol := opt.ProjectPolicy
	if pol == "" {
		var actions []types.EntityUID
		for _, tl := range m.Runtime().Tools() {
			if a, err := authz.ActionOf(tl.Entry(Project)); err == nil && !tl.Builtin {
				actions = append(actions, a)
			}
		}
		pol = authz.DemoPolicy("", actions)
	}
	if _, err := m.Auth().Store.Policies(context.Background(), Project); err == nil && opt.ProjectPolicy == "" {
		return h // a restart keeps the stored policy
	}
	if _, err := m.Auth().Store.PutPolicies(context.Background(), Project, pol); err != nil {
		t.Fatalf("project policy: %v", err)
	}
	return h
}

// Stop stops the mesh and waits for the service to close its file
// (idempotent).
func (h *Harness) Stop() {
	h.stopOnce.Do(func() {
		h.base.Stop()
		<-h.Service.Done()
	})
}

// Mandate issues a mandate for agentID with a Cedar policy set.
func (h *Harness) Mandate(agentID, policies string) string {
	h.T.Helper()
	ctx := context.Background()
	key, _, err := h.Mesh.Auth().Keys.Ensure(ctx, Project)
	if err != nil {
		h.T.Fatal(err)
	}
	tok, err := mandate.Issue(key, mandate.Claims{Subject: agentID, ExpiresAt: time.Now().Add(time.Hour).Unix(),
		Mandate: mandate.Grant{PolicySet: policies}}, time.Now())
	if err != nil {
		h.T.Fatalf("mandate: %v", err)
	}
	return tok
}

// AllTools is a mandate policy permitting every ATP tool (invoke_hem for
// the listed hem ids).
func AllTools(hemIDs ...string) string {
	var b strings.Builder
	b.WriteString(`permit(principal, action in [ATPAction::"get_context_package", ATPAction::"notify_traveller", ATPAction::"update_pre_arrangement",
 ATPAction::"collect_pre_arrangement_data", ATPAction::"record_safety_check", ATPAction::"search_activities", ATPAction::"get_booking_status",
 ATPAdminAction::"booking_create", ATPAdminAction::"booking_get", ATPAdminAction::"booking_transition", ATPAdminAction::"booking_events"], resource);`)
	if len(hemIDs) > 0 {
		q := make([]string, len(hemIDs))
		for i, id := range hemIDs {
			q[i] = fmt.Sprintf("%q", id)
		}
		fmt.Fprintf(&b, "\npermit(principal, action == ATPAction::\"invoke_hem\", resource) when { [%s].contains(context.hem_id) };", strings.Join(q, ", "))
	}
	return b.String()
}

// Agent is an agent client with a mandate.
type Agent struct {
	h  *Harness
	c  *agent.Client
	id string
}

// Agent returns a client for agentID carrying tok.
func (h *Harness) Agent(agentID, tok string) *Agent {
	h.T.Helper()
	return &Agent{h: h, c: h.base.Agent(agentID, tok), id: agentID}
}

// Client is the agent's pkg/agent client.
func (a *Agent) Client() *agent.Client { return a.c }

// Result is a finished call.
type Result struct {
	Status card.Status
	Raw    json.RawMessage
	Value  any
	Error  *card.Error
	// Turn and ToolCallID identify the call.
	Turn, ToolCallID string
}

// Obj is the result as an object.
func (r *Result) Obj() map[string]any { m, _ := r.Value.(map[string]any); return m }

// Call makes a call and waits for its result.
func (a *Agent) Call(tool string, args any) *Result {
	a.h.T.Helper()
	n := a.h.base.Next()
	turn, callID := fmt.Sprintf("turn-%s-%s-%d", a.id, card.NewID()[28:], n), fmt.Sprintf("call-%d", n)
	b := a.h.base.Call(a.c, agent.CallRequest{ToolName: tool, Arguments: a.h.base.Args(args), AgentTurnID: turn, ToolCallID: callID})
	r := &Result{Status: b.Status, Raw: b.Raw, Error: b.Error, Turn: turn, ToolCallID: callID}
	if r.Status == card.StatusSuccess || r.Status == card.StatusPartial {
		if err := json.Unmarshal(r.Raw, &r.Value); err != nil {
			a.h.T.Fatalf("%s: result %s: %v", tool, r.Raw, err)
		}
	}
	return r
}

// OK makes a call that must succeed.
func (a *Agent) OK(tool string, args any) *Result {
	a.h.T.Helper()
	r := a.Call(tool, args)
	if r.Status != card.StatusSuccess {
		a.h.T.Fatalf("%s(%v): status %s, error %+v", tool, args, r.Status, r.Error)
	}
	return r
}

// Fail makes a call that must fail with code; it returns the error.
func (a *Agent) Fail(tool string, args any, code card.ErrorCode) *card.Error {
	a.h.T.Helper()
	r := a.Call(tool, args)
	if r.Status != card.StatusFailed || r.Error == nil || r.Error.Code != code {
		a.h.T.Fatalf("%s(%v): status %s, error %+v, result %s; want failed %s", tool, args, r.Status, r.Error, r.Raw, code)
	}
	return r.Error
}

// Get walks a decoded JSON value by keys and indexes ("a", 0, "b").
var Get = tooltest.Get

// Str is Get as a string.
var Str = tooltest.Str

// Operator makes calls as an operator.
type Operator struct {
	h    *Harness
	name string
}

// Operator returns a caller with the principal operator:<name>. Its calls
// run the tool's handler in this process exactly as the worker runtime
// runs a call the mesh admitted for that principal (worker.Call.Principal
// and Admission set, arguments as given): the mesh's admission service
// (issue 23, branch admit) dispatches operators' calls; until the
// harness's mesh runs it, this is how a test makes an operator's call.
// Agents' calls always go through the mesh (Agent).
func (h *Harness) Operator(name string) *Operator { return &Operator{h: h, name: name} }

// Call runs tool with args as the operator (tooltest.Operator).
func (o *Operator) Call(tool string, args any) *Result {
	o.h.T.Helper()
	all, err := o.h.Service.Tools()
	if err != nil {
		o.h.T.Fatal(err)
	}
	n := o.h.base.Next()
	a := tooltest.Operator(o.name, fmt.Sprintf("turn-operator-%s-%d", o.name, n), o.h.base.Args(args))
	a.ToolCallID = fmt.Sprintf("call-%d", n)
	b := o.h.base.Admitted(all, tool, a)
	r := &Result{Status: b.Status, Raw: b.Raw, Error: b.Error, Turn: b.Turn, ToolCallID: b.ToolCallID}
	if r.Status == card.StatusSuccess {
		if err := json.Unmarshal(r.Raw, &r.Value); err != nil {
			o.h.T.Fatal(err)
		}
	}
	return r
}

// OK runs a call that must succeed.
func (o *Operator) OK(tool string, args any) *Result {
	o.h.T.Helper()
	r := o.Call(tool, args)
	if r.Status != card.StatusSuccess {
		o.h.T.Fatalf("operator %s: %s(%v): status %s, error %+v", o.name, tool, args, r.Status, r.Error)
	}
	return r
}

// Fail runs a call that must fail with code; it returns the error.
func (o *Operator) Fail(tool string, args any, code card.ErrorCode) *card.Error {
	o.h.T.Helper()
	r := o.Call(tool, args)
	if r.Status != card.StatusFailed || r.Error == nil || r.Error.Code != code {
		o.h.T.Fatalf("operator %s: %s(%v): status %s, error %+v; want failed %s", o.name, tool, args, r.Status, r.Error, code)
	}
	return r.Error
}
