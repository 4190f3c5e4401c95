// Package atlastest runs ATLAS services in a real in-process mesh for tests:
// mesh.Start with the services' tools (their NATS connection and CardStore
// bound once the mesh is up, as utpmesh up does), and an agent client that
// makes real calls and reads the result cards.
package atlastest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
)

// Project is the project the harness registers the tools in.
const Project = "demo"

// Late hands a mesh's connection and CardStore to services built before
// the mesh started.
type Late struct {
	once  sync.Once
	ready chan struct{}
	nc    *nats.Conn
	st    cardstore.Store
}

// NewLate returns an unset Late.
func NewLate() *Late { return &Late{ready: make(chan struct{})} }

// Set provides the connection and store (once).
func (l *Late) Set(nc *nats.Conn, st cardstore.Store) {
	l.once.Do(func() { l.nc, l.st = nc, st; close(l.ready) })
}

// Resolve waits for Set.
func (l *Late) Resolve(ctx context.Context) (*nats.Conn, cardstore.Store, error) {
	select {
	case <-l.ready:
		return l.nc, l.st, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// Harness is a running mesh with ATLAS services and an agent.
type Harness struct {
	T       testing.TB
	Mesh    *mesh.Mesh
	Agent   *agent.Client
	DataDir string
	// Time is the created_at of the next call (advanced one second per
	// call), so results are deterministic.
	Time time.Time
	seq  atomic.Int64
	// run makes this harness's turn and call ids distinct from those of
	// an earlier harness on the same data directory.
	run string
}

// Builder builds services' tools from Deps.
type Builder func(atlas.Deps) ([]worker.Tool, error)

// Quiet is a logger that discards everything.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

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
	late := NewLate()
	deps := atlas.Deps{Resolve: late.Resolve, DataDir: dir, Context: ctx, Logger: Quiet}
	var tools []worker.Tool
	for _, b := range builders {
		ts, err := b(deps)
		if err != nil {
			t.Fatalf("build: %v", err)
		}
		tools = append(tools, ts...)
	}
	m, err := mesh.Start(context.Background(), mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Tools: tools, Logger: Quiet})
	if err != nil {
		t.Fatalf("mesh: %v", err)
	}
	cards := m.Cards()
	if wrap != nil {
		cards = wrap(cards)
	}
	late.Set(m.Conn(), cards)
	ag, err := agent.New(m.Conn(), agent.Config{Project: Project, AgentID: "atlas-agent", Logger: Quiet})
	if err != nil {
		t.Fatal(err)
	}
	h := &Harness{T: t, Mesh: m, Agent: ag, DataDir: dir, Time: time.Date(2024, 1, 15, 10, 30, 0, 0, time.UTC), run: card.NewID()[28:]}
	t.Cleanup(func() { h.Stop() })
	return h
}

// Stop stops the agent and the mesh (idempotent).
func (h *Harness) Stop() {
	_ = h.Agent.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = h.Mesh.Stop(ctx)
}

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
	return h.CallID(turn, fmt.Sprintf("call-%s-%d", h.run, h.seq.Add(1)), tool, args)
}

// CallID is Call with a given tool_call_id.
func (h *Harness) CallID(turn, toolCallID, tool string, args any) *Result {
	h.T.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		h.T.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := h.Time
	h.Time = h.Time.Add(time.Second)
	out, err := h.Agent.Call(ctx, agent.CallRequest{ToolName: tool, Arguments: raw, AgentTurnID: turn, ToolCallID: toolCallID, CreatedAt: at})
	if err != nil {
		h.T.Fatalf("%s: %v", tool, err)
	}
	r := &Result{Outcome: out, Status: out.Result.Status, Raw: out.Result.Result, Error: out.Result.Error, Turn: turn, ToolCallID: toolCallID}
	if r.Status == card.StatusSuccess {
		if err := json.Unmarshal(out.Result.Result, &r.Value); err != nil {
			h.T.Fatalf("%s: result %s: %v", tool, out.Result.Result, err)
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
func (h *Harness) Turn() string { return fmt.Sprintf("turn-%s-%d", h.run, h.seq.Add(1)) }

// Get walks a decoded JSON value by keys and indexes ("a", 0, "b").
var Get = meshtest.JSONGet

// Str is Get as a string.
var Str = meshtest.JSONStr
