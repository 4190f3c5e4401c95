// Package gatetest starts a real in-process mesh with the Cedar gate on,
// set up as `utpmesh up` does (authz.SetupDemo: the demo project's issuer
// key, a demo policy set permitting the served tools and the demo mandate
// for authz.DemoAgent), for tests of anything that calls through the gate:
// the agent SDK, the MCP bridge, a catalogue's authorization. It is used
// only by tests and imports no catalogue: the test passes the tools (e.g.
// services/echo's) and a catalogue's authz.Catalogue in Options.
package gatetest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cedar-policy/cedar-go/types"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// Project is the project of the demo setup.
const Project = authz.DemoProject

// Options tune Start.
type Options struct {
	// Tools are the tools the mesh serves (a test usually passes
	// services/echo's). The demo policy set permits every one of them.
	Tools []worker.Tool
	// Catalogues are registered with the gate (a catalogue's Cedar schema
	// fragment and entities).
	Catalogues []authz.Catalogue
	// Logger is the mesh's logger (nil: discarded).
	Logger *slog.Logger
}

// Mesh is a running mesh with the gate on and the demo setup.
type Mesh struct {
	*mesh.Mesh
	// Dir is the mesh's data directory.
	Dir string
	// Demo is the demo mandate: authz.DemoAgent, every served tool.
	Demo string
}

// Start starts the mesh in t.TempDir(); it stops when the test ends.
func Start(t testing.TB, opt Options) *Mesh {
	t.Helper()
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx := context.Background()
	dir := t.TempDir()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Tools: opt.Tools, Logger: opt.Logger,
		Auth: &mesh.AuthConfig{Catalogues: opt.Catalogues}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Stop(sctx)
	})
	var actions []types.EntityUID
	for _, tl := range m.Runtime().Tools() {
		if act, err := authz.ActionOf(tl.Entry(Project)); err == nil && !tl.Builtin && !slices.Contains(actions, act) {
			actions = append(actions, act)
		}
	}
	res, err := authz.SetupDemo(ctx, m.Auth().Store, m.Auth().Keys, []string{Project}, actions, dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(dir, authz.DemoMandateFile))
	if err != nil || res.MandatePath == "" || !res.PolicyInstalled {
		t.Fatalf("demo setup: %+v, %v", res, err)
	}
	return &Mesh{Mesh: m, Dir: dir, Demo: strings.TrimSpace(string(tok))}
}

// Issue signs a mandate of the demo project for agentID with the Cedar
// policies, valid for an hour.
func (m *Mesh) Issue(t testing.TB, agentID, policies string) string {
	t.Helper()
	key, err := m.Auth().Keys.Load(context.Background(), Project)
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

// Agent is an agent client of the demo project as agentID, calling under
// the mandate token; it closes when the test ends.
func (m *Mesh) Agent(t testing.TB, agentID, token string) *agent.Client {
	t.Helper()
	c, err := agent.New(m.Conn(), agent.Config{Project: Project, AgentID: agentID, Mandate: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
