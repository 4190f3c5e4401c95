// Package atlastest runs ATLAS services in a real in-process mesh for tests:
// the toolkit's harness (tooltest) with the services' tools (their NATS
// connection and CardStore bound once the mesh is up, as utpmesh up does),
// an agent client whose calls carry deterministic times, and receipts.
package atlastest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
	"github.com/utpmesh/utpmesh/services/toolkit"
	"github.com/utpmesh/utpmesh/services/toolkit/tooltest"
)

// Project is the project the harness registers the tools in.
const Project = tooltest.Project

// Harness is a running mesh with ATLAS services and an agent.
type Harness struct {
	T       testing.TB
	Mesh    *mesh.Mesh
	Agent   *agent.Client
	DataDir string
	// Time is the created_at of the next call (advanced one second per
	// call), so results are deterministic.
	Time time.Time
	base *tooltest.Harness
}

// Builder builds services' tools from Deps.
type Builder func(atlas.Deps) ([]worker.Tool, error)

// Quiet is a logger that discards everything.
var Quiet = tooltest.Quiet

// Start starts a mesh in a temporary directory serving the tools of the
// builders; everything stops when the test ends. ctx bounds the services
// (their Deps.Context).
func Start(t testing.TB, ctx context.Context, builders ...Builder) *Harness {
	t.Helper()
	dir := t.TempDir()
	return StartIn(t, ctx, dir, builders...)
}

// StartIn is Start with a given data directory (restart tests).
func StartIn(t testing.TB, ctx context.Context, dir string, builders ...Builder) *Harness {
	t.Helper()
	return StartWrapped(t, ctx, dir, nil, builders...)
}

// StartWrapped is StartIn whose services see the mesh's CardStore through
// wrap (nil: as it is), e.g. to make their receipt writes fail.
func StartWrapped(t testing.TB, ctx context.Context, dir string, wrap func(cardstore.Store) cardstore.Store, builders ...Builder) *Harness {
	t.Helper()
	late := toolkit.NewLate()
	deps := atlas.Deps{Resolve: late.Resolve, DataDir: dir, Context: ctx, Logger: Quiet}
	var tools []worker.Tool
	for _, b := range builders {
		ts, err := b(deps)
		if err != nil {
			t.Fatalf("build: %v", err)
		}
		tools = append(tools, ts...)
	}
	base := tooltest.Start(t, mesh.Config{DataDir: dir, Tools: tools})
	cards := base.Mesh.Cards()
	if wrap != nil {
		cards = wrap(cards)
	}
	late.Set(base.Mesh.Conn(), cards)
	return &Harness{T: t, Mesh: base.Mesh, Agent: base.Agent("atlas-agent", ""), DataDir: dir,
		Time: time.Date(2024, 1, 15, 10, 30, 0, 0, time.UTC), base: base}
}

// Stop stops the agent and the mesh (idempotent).
func (h *Harness) Stop() { h.base.Stop() }

// Result is one finished call.
type Result struct {
	Outcome *agent.Outcome
	// Status is the UTP status.
	Status card.Status
	// Value is the decoded result object (nil when failed).
	Value map[string]any
	// Raw is the result JSON.
	Raw json.RawMessage
	// Error is set on failure.
	Error *card.Error
	// Turn and ToolCallID identify the call.
	Turn, ToolCallID string
}

// Call makes a call in turn and waits for its result card.
func (h *Harness) Call(turn, tool string, args any) *Result {
	h.T.Helper()
	return h.CallID(turn, h.base.CallID(), tool, args)
}

// CallID is Call with a given tool_call_id.
func (h *Harness) CallID(turn, toolCallID, tool string, args any) *Result {
	h.T.Helper()
	at := h.Time
	h.Time = h.Time.Add(time.Second)
	b := h.base.Call(h.Agent, agent.CallRequest{ToolName: tool, Arguments: h.base.Args(args), AgentTurnID: turn, ToolCallID: toolCallID, CreatedAt: at})
	r := &Result{Outcome: b.Outcome, Status: b.Status, Raw: b.Raw, Error: b.Error, Turn: turn, ToolCallID: toolCallID}
	if r.Status == card.StatusSuccess {
		if err := json.Unmarshal(r.Raw, &r.Value); err != nil {
			h.T.Fatalf("%s: result %s: %v", tool, r.Raw, err)
		}
	}
	return r
}

// OK makes a call that must succeed and returns its result object.
func (h *Harness) OK(turn, tool string, args any) map[string]any {
	h.T.Helper()
	r := h.Call(turn, tool, args)
	if r.Status != card.StatusSuccess {
		h.T.Fatalf("%s(%v): status %s, error %+v", tool, args, r.Status, r.Error)
	}
	return r.Value
}

// Fail makes a call that must fail with code and returns the message.
func (h *Harness) Fail(turn, tool string, args any, code card.ErrorCode) string {
	h.T.Helper()
	r := h.Call(turn, tool, args)
	if r.Status != card.StatusFailed || r.Error == nil || r.Error.Code != code {
		h.T.Fatalf("%s(%v): status %s, error %+v, result %s; want failed %s", tool, args, r.Status, r.Error, r.Raw, code)
	}
	return r.Error.Message
}

// Receipt assembles a turn's receipt.
func (h *Harness) Receipt(turn string) *receipts.Receipt {
	h.T.Helper()
	r, err := receipts.Assemble(context.Background(), h.Mesh.Cards(), Project, turn)
	if err != nil {
		h.T.Fatal(err)
	}
	return r
}

// Turn returns a fresh turn id.
func (h *Harness) Turn() string { return fmt.Sprintf("turn-%s-%d", h.base.Run, h.base.Next()) }

// Get walks a decoded JSON value by keys and indexes ("a", 0, "b").
var Get = tooltest.Get

// Str is Get as a string.
var Str = tooltest.Str
