// Package tooltest is the test harness of the catalogues (ATLAS, ATP,
// CyNodeAI): a real in-process mesh (mesh.Start) serving a catalogue's
// tools, agent clients that make real calls and read the result cards,
// and calls run as the worker runtime runs a call the mesh admitted (an
// operator's, say). The catalogues' own harnesses (atlastest, atptest,
// cynodetest) are thin wrappers that add their domain: fixtures, mandates,
// the shape of their results.
package tooltest

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

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// Project is the project the harness's calls run in.
const Project = "demo"

// CallTimeout bounds one call of the harness.
const CallTimeout = 30 * time.Second

// Quiet is a logger that discards everything.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Get walks a decoded JSON value by keys and indexes ("a", 0, "b").
var Get = meshtest.JSONGet

// Str is Get as a string.
var Str = meshtest.JSONStr

// Harness is a running mesh serving a catalogue's tools.
type Harness struct {
	T    testing.TB
	Mesh *mesh.Mesh
	// DataDir is the mesh's data directory.
	DataDir string
	// Run is unique to this harness, so the ids it makes differ from
	// those of an earlier harness on the same data directory.
	Run string

	seq      atomic.Int64
	mu       sync.Mutex
	agents   map[string]*agent.Client
	stopOnce sync.Once
}

// Start starts a mesh with cfg; an empty DataDir is a temporary
// directory, an empty Listen a free loopback port, a nil Logger Quiet.
// The mesh and the agents stop when the test ends (or at Stop).
func Start(t testing.TB, cfg mesh.Config) *Harness {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = Quiet
	}
	m, err := mesh.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("mesh: %v", err)
	}
	h := &Harness{T: t, Mesh: m, DataDir: cfg.DataDir, Run: card.NewID()[28:], agents: map[string]*agent.Client{}}
	t.Cleanup(h.Stop)
	return h
}

// Stop closes the agents and stops the mesh (idempotent).
func (h *Harness) Stop() {
	h.stopOnce.Do(func() {
		h.mu.Lock()
		for _, a := range h.agents {
			_ = a.Close()
		}
		h.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = h.Mesh.Stop(ctx)
	})
}

// Agent returns the client of agentID carrying mandate (one client per
// pair, closed at Stop).
func (h *Harness) Agent(agentID, mandate string) *agent.Client {
	h.T.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	key := agentID + "\x00" + mandate
	if a, ok := h.agents[key]; ok {
		return a
	}
	a, err := agent.New(h.Mesh.Conn(), agent.Config{Project: Project, AgentID: agentID, Mandate: mandate, Logger: Quiet})
	if err != nil {
		h.T.Fatal(err)
	}
	h.agents[key] = a
	return a
}

// Next returns the next number of the harness's sequence (1, 2, …).
func (h *Harness) Next() int64 { return h.seq.Add(1) }

// CallID returns a fresh tool_call_id.
func (h *Harness) CallID() string { return fmt.Sprintf("call-%s-%d", h.Run, h.Next()) }

// Result is one finished call.
type Result struct {
	// Outcome is the agent's outcome (nil for Admitted).
	Outcome *agent.Outcome
	// Status is the UTP status.
	Status card.Status
	// Raw is the result JSON (nil when failed).
	Raw json.RawMessage
	// Error is set on failure.
	Error *card.Error
	// Turn and ToolCallID identify the call.
	Turn, ToolCallID string
}

// Call makes a real call through the mesh as ag and waits for its result
// card; a call that gets no result fails the test. An empty ToolCallID is
// a fresh one.
func (h *Harness) Call(ag *agent.Client, req agent.CallRequest) *Result {
	h.T.Helper()
	if req.ToolCallID == "" {
		req.ToolCallID = h.CallID()
	}
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	out, err := ag.Call(ctx, req)
	if err != nil {
		h.T.Fatalf("%s: %v", req.ToolName, err)
	}
	return &Result{Outcome: out, Status: out.Result.Status, Raw: out.Result.Result, Error: out.Result.Error,
		Turn: req.AgentTurnID, ToolCallID: req.ToolCallID}
}

// Args encodes a call's arguments; a value that does not encode fails the
// test.
func (h *Harness) Args(args any) json.RawMessage {
	h.T.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		h.T.Fatal(err)
	}
	return raw
}

// Admit is a call as the mesh admitted it.
type Admit struct {
	// AgentID, Turn and ToolCallID are the command's (ToolCallID "": a
	// fresh one).
	AgentID, Turn, ToolCallID string
	// Principal is worker.Call.Principal.
	Principal string
	// Admission is the mesh's admission (its routing fields are filled
	// from the call); nil for a call without one.
	Admission *utp.Admission
	// Args are the arguments.
	Args json.RawMessage
}

// Operator is the Admit of an operator's call: principal operator:<name>
// and an admission that says so.
func Operator(name, turn string, args json.RawMessage) Admit {
	p := utp.PrincipalOperator + ":" + name
	return Admit{AgentID: name, Turn: turn, Principal: p, Admission: &utp.Admission{Principal: p}, Args: args}
}

// Admitted runs tool's handler in this process exactly as the worker
// runtime runs a call the mesh admitted (worker.Call.Principal and
// Admission set, no tool.call card, arguments as given). The mesh's
// admission service dispatches operators' calls; until a harness's mesh
// runs it, this is how a test makes one. A handler error that is not a
// *card.Error is an internal_error, as the runtime records it.
func (h *Harness) Admitted(tools []worker.Tool, tool string, a Admit) *Result {
	h.T.Helper()
	var handler worker.HandlerFunc
	for _, tl := range tools {
		if tl.Name == tool {
			handler = tl.Handler
		}
	}
	if handler == nil {
		h.T.Fatalf("no tool %s", tool)
	}
	if a.ToolCallID == "" {
		a.ToolCallID = h.CallID()
	}
	cmd := utp.Command{AgentID: a.AgentID, AgentTurnID: a.Turn, ToolCallID: a.ToolCallID, AfterExecution: card.Suspend,
		ToolCallCardID: card.NewID(), ToolName: tool}
	adm := a.Admission
	if adm != nil {
		cp := *adm
		cp.V, cp.AgentID, cp.AgentTurnID, cp.ToolCallID, cp.ToolCallCardID, cp.ToolName, cp.AfterExecution =
			utp.AdmissionVersion, cmd.AgentID, cmd.AgentTurnID, cmd.ToolCallID, cmd.ToolCallCardID, tool, cmd.AfterExecution
		adm = &cp
	}
	c := &worker.Call{Version: "v1r3", ProjectID: Project, ChannelID: "main", ToolName: tool, Command: cmd, Arguments: a.Args,
		Delivery: 1, Principal: a.Principal, Admission: adm}
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	res, err := handler(ctx, c)
	r := &Result{Status: card.StatusSuccess, Turn: a.Turn, ToolCallID: a.ToolCallID}
	var ce *card.Error
	switch {
	case errors.As(err, &ce):
		r.Status, r.Error = card.StatusFailed, ce
	case err != nil:
		r.Status, r.Error = card.StatusFailed, &card.Error{Code: card.CodeInternalError, Message: err.Error()}
	default:
		if res.Status != "" {
			r.Status = res.Status
		}
		if r.Raw, err = json.Marshal(res.Value); err != nil {
			h.T.Fatalf("%s: result: %v", tool, err)
		}
	}
	return r
}
