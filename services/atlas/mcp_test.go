package atlas_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
	"github.com/utpmesh/utpmesh/services/atlas/calendar"
	"github.com/utpmesh/utpmesh/services/atlas/internal/atlastest"
	"github.com/utpmesh/utpmesh/services/atlas/utility"
)

// mcpSession serves a new MCP bridge (pkg/apps/mcpbridge) on h's mesh
// over stdio and connects an official-SDK client with protocol version
// ver; elicit answers elicitations (nil: the client does not declare
// elicitation). The mesh has no gate: the bridge calls as agent tester.
func mcpSession(t *testing.T, h *atlastest.Harness, ver string, elicit func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error)) *sdk.ClientSession {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b, err := mcpbridge.New(mcpbridge.Config{Conn: h.Mesh.Conn(), Project: atlastest.Project, CallTimeout: time.Minute, Logger: atlastest.Quiet})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	id, err := mcpbridge.NewIdentity("tester", "")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- b.ServeStdio(ctx, id, sr, sw) }()
	t.Cleanup(func() {
		_ = cw.Close()
		cancel()
		<-done
		_ = b.Close()
	})
	c := sdk.NewClient(&sdk.Implementation{Name: "atlas-test", Version: "1"}, &sdk.ClientOptions{ElicitationHandler: elicit})
	cs, err := c.Connect(ctx, &sdk.IOTransport{Reader: cr, Writer: cw}, &sdk.ClientSessionOptions{ProtocolVersion: ver})
	if err != nil {
		t.Fatalf("connect with %s: %v", ver, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// mcpCall calls a tool through the bridge and returns whether it is an
// error, its structuredContent as an object and its text.
func mcpCall(t *testing.T, cs *sdk.ClientSession, name string, args any) (isError bool, s map[string]any, text string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("structuredContent %s: %v", raw, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return res.IsError, s, b.String()
}

// TestConfirmationThroughMCP: ATLAS's confirmations through the MCP
// bridge. CALENDAR_CREATE_BLOCKS answers PENDING_CONFIRM naming no
// resolver, so the bridge asks the host and runs the convention's default
// resolvers: accept → ATLAS_CONFIRM (OK, the blocks exist), decline →
// ATLAS_CANCEL (SKIPPED, nothing created); a host without elicitation gets
// the pending result saying to call ATLAS_CONFIRM, and does.
func TestConfirmationThroughMCP(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := atlastest.Start(t, ctx, calendar.Build, utility.Build)
	day := 0
	blocks := func() map[string]any { // each proposal on a day of its own
		day++
		return map[string]any{"date": fmt.Sprintf("2024-02-%02d", day), "blocks": []map[string]string{{"title": "Focus", "start": "09:00", "end": "10:00", "type": "focus"}}}
	}
	blocksOn := func(t *testing.T, cs *sdk.ClientSession, date any) int {
		t.Helper()
		isErr, s, text := mcpCall(t, cs, calendar.ToolGetDay, map[string]any{"date": date})
		list, ok := s["blocks"].([]any)
		if isErr || !ok {
			t.Fatalf("%s: %q", calendar.ToolGetDay, text)
		}
		return len(list)
	}
	for _, ver := range []string{"2026-07-28", "2025-11-25"} {
		t.Run(ver, func(t *testing.T) {
			for _, tc := range []struct {
				action, status string
				created        int
			}{{"accept", "OK", 1}, {"decline", "SKIPPED", 0}} {
				var asked []string
				cs := mcpSession(t, h, ver, func(_ context.Context, r *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
					asked = append(asked, r.Params.Message)
					if tc.action == "accept" {
						return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}}, nil
					}
					return &sdk.ElicitResult{Action: tc.action}, nil
				})
				args := blocks()
				isErr, s, text := mcpCall(t, cs, calendar.ToolCreateBlocks, args)
				if isErr || s["status"] != tc.status || len(asked) != 1 || !strings.Contains(asked[0], calendar.ToolCreateBlocks+" waits for your confirmation (cfm_") {
					t.Fatalf("%s: isError %v, structured %v, text %q, asked %q", tc.action, isErr, s, text, asked)
				}
				if n := blocksOn(t, cs, args["date"]); n != tc.created {
					t.Fatalf("%s: %d blocks on %v, want %d", tc.action, n, args["date"], tc.created)
				}
			}
			cs := mcpSession(t, h, ver, nil)
			isErr, s, text := mcpCall(t, cs, calendar.ToolCreateBlocks, blocks())
			id, _ := s["confirmation_id"].(string)
			if isErr || s["status"] != "PENDING_CONFIRM" || id == "" ||
				!strings.Contains(text, utility.ToolConfirm+` with {"confirmation_id":"`+id+`"}`) || !strings.Contains(text, "drop it with "+utility.ToolCancel) {
				t.Fatalf("no elicitation: isError %v, structured %v, text %q", isErr, s, text)
			}
			if isErr, s, text = mcpCall(t, cs, utility.ToolConfirm, map[string]any{"confirmation_id": id}); isErr || s["status"] != "OK" {
				t.Fatalf("%s by the host: %q", utility.ToolConfirm, text)
			}
		})
	}
}
