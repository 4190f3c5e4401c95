package atlas_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge/mcptest"
	"github.com/utpmesh/utpmesh/services/atlas/calendar"
	"github.com/utpmesh/utpmesh/services/atlas/internal/atlastest"
	"github.com/utpmesh/utpmesh/services/atlas/utility"
)

// mcpSession serves a new MCP bridge (pkg/apps/mcpbridge) on h's mesh
// over stdio and connects an official-SDK client with protocol version
// ver; elicit answers elicitations (nil: the client does not declare
// elicitation). The mesh has no gate: the bridge calls as agent tester.
func mcpSession(t *testing.T, h *atlastest.Harness, ver string, elicit mcptest.Elicit) *sdk.ClientSession {
	t.Helper()
	b, err := mcpbridge.New(mcpbridge.Config{Conn: h.Mesh.Conn(), Project: atlastest.Project, CallTimeout: time.Minute, Logger: atlastest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return mcptest.Connect(t, b, mcptest.Stdio, ver, "", mcptest.Elicitation(elicit))
}

// mcpCall calls a tool through the bridge and returns whether it is an
// error, its structuredContent as an object and its text.
func mcpCall(t *testing.T, cs *sdk.ClientSession, name string, args any) (isError bool, s map[string]any, text string) {
	t.Helper()
	res := mcptest.CallTool(t, cs, name, args)
	return res.IsError, mcptest.Structured(t, res), mcptest.Text(res)
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
	for _, ver := range mcptest.Versions {
		t.Run(ver, func(t *testing.T) {
			for _, tc := range []struct {
				action, status string
				created        int
			}{{"accept", "OK", 1}, {"decline", "SKIPPED", 0}} {
				var asked []string
				answer := &sdk.ElicitResult{Action: tc.action}
				if tc.action == "accept" {
					answer = mcptest.Confirm(true, "")
				}
				cs := mcpSession(t, h, ver, mcptest.Answer(answer, &asked))
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
