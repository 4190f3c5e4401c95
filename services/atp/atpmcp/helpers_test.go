package atpmcp_test

import (
	"context"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge/mcptest"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/services/atp/internal/atptest"
)

// The ATP catalogue through the MCP bridge (pkg/apps/mcpbridge), as MCP
// hosts see it: a real mesh with the Cedar gate and the ATP service
// (atptest), a bridge with ATP's Handoff registered, and MCP clients of
// both libraries — the official go-sdk (elicitation) and mcp-go (tasks,
// which the go-sdk client lacks). The bridge's own behaviour, for any
// catalogue, is tested in pkg/apps/mcpbridge with test-only fixtures.

// fixture is the ATP harness's mesh.
type fixture struct {
	h *atptest.Harness
	m *mesh.Mesh
}

func startMesh(t *testing.T) *fixture {
	t.Helper()
	h := atptest.Start(t, atptest.Options{})
	operatorMesh = h
	// atp_invoke_hem escalates about a booking: the fixture's.
	b, err := h.Service.LoadFixture(context.Background(), atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	invokeHEM["booking_object_id"] = b.ID
	return &fixture{h: h, m: h.Mesh}
}

// issue signs a mandate of the harness's project for agentID.
func (f *fixture) issue(t *testing.T, agentID, policies string) string {
	t.Helper()
	return f.h.Mandate(agentID, policies)
}

// newBridge is a bridge on m with its own handoffs (none: the registered
// one); it closes when the test ends.
func newBridge(t *testing.T, m *mesh.Mesh, handoffs ...mcpbridge.Handoff) *mcpbridge.Bridge {
	t.Helper()
	b, err := mcpbridge.New(mcpbridge.Config{Conn: m.Conn(), Project: atptest.Project, CallTimeout: time.Minute, Logger: atptest.Quiet,
		Handoffs: handoffs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// connect serves a new bridge over tr and connects an official-SDK
// client with protocol version ver, calling as the mandate token. elicit
// answers elicitations (nil: the client does not declare elicitation).
func (f *fixture) connect(t *testing.T, tr mcptest.Transport, ver, token string, elicit mcptest.Elicit, handoffs ...mcpbridge.Handoff) (*sdk.ClientSession, *mcpbridge.Bridge) {
	t.Helper()
	b := newBridge(t, f.m, handoffs...)
	return mcptest.Connect(t, b, tr, ver, token, mcptest.Elicitation(elicit)), b
}

// serveTasks starts a new bridge on m over tr and connects mcp-go's client
// to it as the agent of token. Stop ends both (a bridge restart).
func serveTasks(t *testing.T, m *mesh.Mesh, tr mcptest.Transport, token string) *mcptest.TaskClient {
	t.Helper()
	return mcptest.ServeTasks(t, newBridge(t, m), tr, token)
}
