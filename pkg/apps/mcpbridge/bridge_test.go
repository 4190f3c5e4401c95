package mcpbridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge/mcptest"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/confirm"
	"github.com/utpmesh/utpmesh/pkg/confirm/confirmtest"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/mesh/gatetest"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fixture is a real mesh with the Cedar gate on, serving echo and two
// test-only catalogues — hold (confirmations in the mesh's convention,
// pkg/confirm/confirmtest) and ticket (an operator handoff, ticket_test.go) — with
// the demo mandate (every tool) and a narrow one (echo only), both for
// agent demo-agent.
type fixture struct {
	g              *gatetest.Mesh // nil: a mesh without the gate
	m              *mesh.Mesh
	holds          *confirmtest.Holds
	tickets        *tickets
	demo, onlyEcho string
	// callTimeout is the bridges' CallTimeout (default a minute).
	callTimeout time.Duration
}

func startMesh(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{holds: confirmtest.New(), tickets: newTickets()}
	tools := append([]worker.Tool{echo.Tool()}, f.holds.Tools()...)
	tools = append(tools, f.tickets.tools()...)
	f.g = gatetest.Start(t, gatetest.Options{Tools: tools, Logger: quiet})
	f.m, f.demo = f.g.Mesh, f.g.Demo
	f.tickets.setMesh(f.m.Conn(), f.m.Cards())
	f.onlyEcho = f.g.Issue(t, authz.DemoAgent, `permit(principal, action == Action::"echo", resource);`)
	return f
}

func (f *fixture) bridge(t *testing.T) *mcpbridge.Bridge {
	t.Helper()
	ct := f.callTimeout
	if ct == 0 {
		ct = time.Minute
	}
	b, err := mcpbridge.New(mcpbridge.Config{Conn: f.m.Conn(), Project: "demo", CallTimeout: ct, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// connect serves a new bridge over tr and connects an official-SDK
// client with protocol version ver, calling as the mandate token. elicit
// answers confirmations (nil: the client does not declare elicitation).
func (f *fixture) connect(t *testing.T, tr mcptest.Transport, ver, token string, elicit mcptest.Elicit) (*sdk.ClientSession, *mcpbridge.Bridge) {
	t.Helper()
	return f.connectWith(t, tr, ver, token, mcptest.Elicitation(elicit))
}

// connectWith is connect with the client's options.
func (f *fixture) connectWith(t *testing.T, tr mcptest.Transport, ver, token string, opts *sdk.ClientOptions) (*sdk.ClientSession, *mcpbridge.Bridge) {
	t.Helper()
	b := f.bridge(t)
	return mcptest.Connect(t, b, tr, ver, token, opts), b
}

// TestListFilteredByMandate: tools/list is the registry with each JSON
// Schema as inputSchema, narrowed to what the mandate permits.
func TestListFilteredByMandate(t *testing.T) {
	f := startMesh(t)
	mcptest.Each(t, func(t *testing.T, tr mcptest.Transport, ver string) {
		cs, _ := f.connect(t, tr, ver, f.demo, nil)
		all := mcptest.ToolNames(t, cs)
		if got, want := keys(all), []string{"echo", confirmtest.Tool, confirmtest.CancelTool, confirmtest.ConfirmTool, toolTicket, toolTicketApprove, toolTicketReject}; !slices.Equal(got, want) {
			t.Fatalf("demo mandate lists %v, want %v", got, want)
		}
		schema, _ := json.Marshal(all[confirmtest.Tool].InputSchema)
		if !strings.Contains(string(schema), `"what"`) || !strings.Contains(string(schema), `"object"`) {
			t.Fatalf("inputSchema of %s = %s", confirmtest.Tool, schema)
		}
		cs2, _ := f.connect(t, tr, ver, f.onlyEcho, nil)
		if got := keys(mcptest.ToolNames(t, cs2)); !slices.Equal(got, []string{"echo"}) {
			t.Fatalf("echo-only mandate lists %v, want [echo]", got)
		}
	})
}

func keys(m map[string]*sdk.Tool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestCallIsOneUTPCall: a tools/call is one UTP call of the session's
// turn; its result is structuredContent plus text, and the call card
// carries the MCP request id and session.
func TestCallIsOneUTPCall(t *testing.T) {
	f := startMesh(t)
	mcptest.Each(t, func(t *testing.T, tr mcptest.Transport, ver string) {
		cs, b := f.connect(t, tr, ver, f.demo, nil)
		res := mcptest.CallTool(t, cs, "echo", map[string]any{"x": 1})
		if res.IsError || mcptest.Structured(t, res)["x"] != float64(1) || mcptest.Text(res) != `{"x":1}` {
			t.Fatalf("echo: isError %v, structured %v, text %q", res.IsError, res.StructuredContent, mcptest.Text(res))
		}
		turn, _ := res.Meta[mcpbridge.MetaAgentTurnID].(string)
		callID, _ := res.Meta[mcpbridge.MetaToolCallID].(string)
		if !strings.HasPrefix(turn, "mcp-") || callID == "" {
			t.Fatalf("_meta = %v", res.Meta)
		}
		if tr == mcptest.Stdio && turn != b.SessionTurn() {
			t.Fatalf("stdio turn %s, want the session's %s", turn, b.SessionTurn())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cards, err := cardstore.AllTurn(ctx, f.m.Cards(), "demo", turn)
		if err != nil {
			t.Fatal(err)
		}
		var call, result *card.Card
		for _, c := range cards {
			if c.ToolCallID != callID {
				continue
			}
			switch c.Type {
			case card.TypeToolCall:
				call = c
			case card.TypeToolResult:
				result = c
			}
		}
		if call == nil || result == nil {
			t.Fatalf("turn %s has no tool.call and tool.result for %s (%d cards)", turn, callID, len(cards))
		}
		var md struct {
			SessionID, RequestID, ProtocolVersion string
		}
		raw := call.Metadata.Extra[mcpbridge.MetadataKey]
		if err := json.Unmarshal(raw, &struct {
			SessionID       *string `json:"session_id"`
			RequestID       *string `json:"request_id"`
			ProtocolVersion *string `json:"protocol_version"`
		}{&md.SessionID, &md.RequestID, &md.ProtocolVersion}); err != nil {
			t.Fatalf("metadata.mcp = %s: %v", raw, err)
		}
		if md.RequestID == "" || (md.SessionID == "") != (tr == mcptest.HTTP && ver == "2026-07-28") {
			t.Fatalf("metadata.mcp = %s", raw)
		}
		if md.ProtocolVersion != ver {
			t.Fatalf("metadata.mcp protocol_version = %q, want %s", md.ProtocolVersion, ver)
		}
	})
}

// TestFailuresAreToolErrors: a schema violation and a gate denial come
// back as isError results with the UTP error code and message.
func TestFailuresAreToolErrors(t *testing.T) {
	f := startMesh(t)
	mcptest.Each(t, func(t *testing.T, tr mcptest.Transport, ver string) {
		cs, _ := f.connect(t, tr, ver, f.demo, nil)
		res := mcptest.CallTool(t, cs, confirmtest.Tool, map[string]any{"what": 5})
		e, _ := mcptest.Structured(t, res)["error"].(map[string]any)
		if !res.IsError || e["code"] != string(card.CodeBadRequest) || !strings.HasPrefix(mcptest.Text(res), "failed: bad_request: ") {
			t.Fatalf("schema error: isError %v, text %q, structured %v", res.IsError, mcptest.Text(res), res.StructuredContent)
		}
		res = mcptest.CallTool(t, cs, "echo", []int{1, 2})
		if !res.IsError || !strings.Contains(mcptest.Text(res), "the arguments of echo must be a JSON object") {
			t.Fatalf("array arguments: isError %v, text %q", res.IsError, mcptest.Text(res))
		}
		narrow, _ := f.connect(t, tr, ver, f.onlyEcho, nil)
		res = mcptest.CallTool(t, narrow, confirmtest.Tool, map[string]any{"what": "a room"})
		e, _ = mcptest.Structured(t, res)["error"].(map[string]any)
		if !res.IsError || e["code"] != string(card.CodeAuthFailed) || !strings.Contains(mcptest.Text(res), "failed: auth_failed: ") || !strings.Contains(mcptest.Text(res), "utpmesh mandate issue") {
			t.Fatalf("gate denial: isError %v, text %q, structured %v", res.IsError, mcptest.Text(res), res.StructuredContent)
		}
	})
}

// TestConfirmationAsElicitation: a result that waits for a human's
// confirmation (the convention of package confirm, here the hold
// catalogue's) is asked as an elicitation; accept runs the result's confirm
// tool, decline its cancel tool, each a UTP call of the session's turn; a
// host without elicitation gets the pending result and the confirmation
// id, and confirms it by calling the confirm tool itself.
func TestConfirmationAsElicitation(t *testing.T) {
	f := startMesh(t)
	mcptest.Each(t, func(t *testing.T, tr mcptest.Transport, ver string) {
		for _, tc := range []struct {
			action       string
			answer       *sdk.ElicitResult
			status, held string
			declined     string // the answer the text says the host gave
		}{
			{"accept", mcptest.Confirm(true, ""), confirm.StatusOK, "a room", ""},
			{"accept-false", mcptest.Confirm(false, ""), confirm.StatusSkipped, "", "confirm: false"},
			{"decline", &sdk.ElicitResult{Action: "decline"}, confirm.StatusSkipped, "", "decline"},
			{"cancel", &sdk.ElicitResult{Action: "cancel"}, confirm.StatusSkipped, "", "cancel"},
		} {
			var asked []string
			cs, _ := f.connect(t, tr, ver, f.demo, mcptest.Answer(tc.answer, &asked))
			res := mcptest.CallTool(t, cs, confirmtest.Tool, map[string]any{"what": "a room"})
			s := mcptest.Structured(t, res)
			id, _ := s["confirmation_id"].(string)
			if res.IsError || s["status"] != tc.status || len(asked) != 1 || !strings.Contains(asked[0], "hold waits for your confirmation ("+id+"): it would hold a room") {
				t.Fatalf("%s: isError %v, structured %v, text %q, asked %q", tc.action, res.IsError, s, mcptest.Text(res), asked)
			}
			// A declined confirmation says so in the text, before the
			// cancel tool's result; an accepted one does not.
			text := mcptest.Text(res)
			wantNote := fmt.Sprintf("Declined: the host answered %q to confirmation %s, so %s did not run; %s dropped it.", tc.declined, id, confirmtest.Tool, confirmtest.CancelTool)
			if tc.declined != "" && !strings.HasPrefix(text, wantNote) || tc.declined == "" && strings.Contains(text, "Declined") {
				t.Fatalf("%s: text %q, want it to start %q", tc.action, text, wantNote)
			}
			if got, _ := s["result"].(map[string]any); tc.held != "" && (got == nil || got["held"] != tc.held) {
				t.Fatalf("%s: result %v, want the held value", tc.action, s["result"])
			}
			if parkedIn, resolvedIn := f.holds.Resolved(id); parkedIn == "" || resolvedIn != parkedIn || res.Meta[mcpbridge.MetaAgentTurnID] != parkedIn {
				t.Fatalf("%s: parked in turn %q, resolved in %q, answered from %v; want one turn", tc.action, parkedIn, resolvedIn, res.Meta[mcpbridge.MetaAgentTurnID])
			}
		}
		cs, _ := f.connect(t, tr, ver, f.demo, nil)
		res := mcptest.CallTool(t, cs, confirmtest.Tool, map[string]any{"what": "a desk"})
		s := mcptest.Structured(t, res)
		id, _ := s["confirmation_id"].(string)
		// A client that did not declare elicitation is not sent
		// elicitation/create (the go-sdk client would refuse it, and the
		// text would say the host did not answer).
		if res.IsError || s["status"] != confirm.StatusPending || id == "" ||
			!strings.Contains(mcptest.Text(res), "did not declare the elicitation capability, so it was not asked") ||
			!strings.Contains(mcptest.Text(res), confirmtest.ConfirmTool+` with {"confirmation_id":"`+id+`"}`) || !strings.Contains(mcptest.Text(res), "drop it with "+confirmtest.CancelTool) {
			t.Fatalf("no elicitation: isError %v, structured %v, text %q", res.IsError, s, mcptest.Text(res))
		}
		if _, resolvedIn := f.holds.Resolved(id); resolvedIn != "" {
			t.Fatalf("no elicitation: hold %s resolved in %s", id, resolvedIn)
		}
		res = mcptest.CallTool(t, cs, confirmtest.ConfirmTool, map[string]any{"confirmation_id": id})
		if res.IsError || mcptest.Structured(t, res)["status"] != confirm.StatusOK {
			t.Fatalf("%s by the host: %q", confirmtest.ConfirmTool, mcptest.Text(res))
		}
	})
}

// TestHTTPNeedsBearer: an HTTP request without a mandate, or with one the
// mesh does not accept, is refused with 401 and a body that says what to
// send.
func TestHTTPNeedsBearer(t *testing.T) {
	f := startMesh(t)
	hs := httptest.NewServer(f.bridge(t).HTTPHandler())
	defer hs.Close()
	other, _, err := mandate.NewKeyDir(t.TempDir()).Ensure(context.Background(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	forged, err := mandate.Issue(other, mandate.Claims{Subject: "intruder", ExpiresAt: time.Now().Add(time.Hour).Unix(),
		Mandate: mandate.Grant{PolicySet: `permit(principal, action == Action::"echo", resource);`}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, auth, code, want string }{
		{"none", "", "invalid_request", "Authorization: Bearer <token>"},
		{"not a mandate", "Bearer abc", "invalid_token", "not a mandate token"},
		{"signed by another key", "Bearer " + forged, "invalid_token", "mandate refused for project demo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, hs.URL+mcpbridge.HTTPPath, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
			req.Header.Set("Content-Type", "application/json")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			var got struct {
				Error            string `json:"error"`
				ErrorDescription string `json:"error_description"`
			}
			if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != http.StatusUnauthorized ||
				got.Error != tc.code || !strings.Contains(got.ErrorDescription, tc.want) {
				t.Fatalf("status %d, body %s; want 401, error %q and an error_description with %q", resp.StatusCode, body, tc.code, tc.want)
			}
			// An MCP host reads the challenge: the same code and
			// description, in RFC 6750's syntax (no '"' inside).
			challenge := regexp.MustCompile(`^Bearer realm="utpmesh", error="([a-z_]+)", error_description="([^"\\]*)"$`).
				FindStringSubmatch(resp.Header.Get("WWW-Authenticate"))
			if challenge == nil || challenge[1] != tc.code || !strings.Contains(challenge[2], tc.want) {
				t.Fatalf("WWW-Authenticate %q: want error %q and an error_description with %q", resp.Header.Get("WWW-Authenticate"), tc.code, tc.want)
			}
		})
	}
}

// TestListChangedOnRegistryChange: a registry change the bridge sees is
// announced with notifications/tools/list_changed, and the next list
// shows it.
func TestListChangedOnRegistryChange(t *testing.T) {
	f := startMesh(t)
	n := 0
	mcptest.Each(t, func(t *testing.T, tr mcptest.Transport, ver string) {
		changed := make(chan struct{}, 8)
		cs, _ := f.connectWith(t, tr, ver, f.demo, &sdk.ClientOptions{
			ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { changed <- struct{}{} }})
		mcptest.ToolNames(t, cs) // the bridge has served the registry's tools
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		e, err := f.m.Registry().Get(ctx, "demo", "echo")
		if err != nil {
			t.Fatal(err)
		}
		n++
		e.Description = fmt.Sprintf("echo, changed %d", n)
		if _, err := f.m.Registry().Put(ctx, e); err != nil {
			t.Fatal(err)
		}
		if got := mcptest.ToolNames(t, cs)["echo"].Description; got != e.Description {
			t.Fatalf("description after the change = %q, want %q", got, e.Description)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("no notifications/tools/list_changed")
		}
	})
}

// TestWatchAnnouncesRegistryChanges: with Watch running, a registry change
// is announced while the host neither lists nor calls.
func TestWatchAnnouncesRegistryChanges(t *testing.T) {
	f := startMesh(t)
	changed := make(chan struct{}, 8)
	cs, b := f.connectWith(t, mcptest.Stdio, "2025-11-25", f.demo, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { changed <- struct{}{} }})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go b.Watch(ctx, 10*time.Millisecond)
	e, err := f.m.Registry().Get(ctx, "demo", "echo")
	if err != nil {
		t.Fatal(err)
	}
	e.Description = "echo, watched"
	if _, err := f.m.Registry().Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("no notifications/tools/list_changed from Watch")
	}
	if got := mcptest.ToolNames(t, cs)["echo"].Description; got != "echo, watched" {
		t.Fatalf("description = %q", got)
	}
}

// TestMeshWithoutGate: on a mesh without the Cedar gate every registry
// entry is listed and called, and an HTTP bearer mandate is only decoded
// (nothing on the mesh verifies mandates).
func TestMeshWithoutGate(t *testing.T) {
	ctx := context.Background()
	m := plainMesh(t, echo.Tool())
	key, _, err := mandate.NewKeyDir(t.TempDir()).Ensure(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := mandate.Issue(key, mandate.Claims{Subject: "someone", ExpiresAt: time.Now().Add(time.Hour).Unix(),
		Mandate: mandate.Grant{PolicySet: `permit(principal, action == Action::"echo", resource);`}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{m: m}
	mcptest.Each(t, func(t *testing.T, tr mcptest.Transport, ver string) {
		cs, _ := f.connect(t, tr, ver, tok, nil)
		if got := keys(mcptest.ToolNames(t, cs)); !slices.Equal(got, []string{"echo"}) {
			t.Fatalf("tools = %v, want [echo]", got)
		}
		if res := mcptest.CallTool(t, cs, "echo", map[string]any{"y": 2}); res.IsError || mcptest.Text(res) != `{"y":2}` {
			t.Fatalf("echo: %q", mcptest.Text(res))
		}
	})
}

// TestCallStillRunning: a call with no result within the bridge's call
// timeout is answered isError naming the call, which goes on and ends
// with its result card in the session's turn.
func TestCallStillRunning(t *testing.T) {
	ctx := context.Background()
	release := make(chan string)
	m := plainMesh(t, slowTool(release))
	defer close(release)
	f := &fixture{m: m, callTimeout: 50 * time.Millisecond}
	cs, _ := f.connect(t, mcptest.Stdio, "2025-11-25", "", nil)
	res := mcptest.CallTool(t, cs, "slow", map[string]any{})
	callID, _ := res.Meta[mcpbridge.MetaToolCallID].(string)
	turn, _ := res.Meta[mcpbridge.MetaAgentTurnID].(string)
	if !res.IsError || res.Meta[mcpbridge.MetaStatus] != "pending" || !strings.Contains(mcptest.Text(res), "still running and goes on") || callID == "" {
		t.Fatalf("isError %v, _meta %v, text %q", res.IsError, res.Meta, mcptest.Text(res))
	}
	release <- "yes"
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// The same call again (same turn and tool_call_id) is idempotent: it
	// waits for the original's result through the inbox.
	ac, err := agent.New(m.Conn(), agent.Config{Project: "demo", AgentID: "tester", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	out, err := ac.Call(wctx, agent.CallRequest{ToolName: "slow", AgentTurnID: turn, ToolCallID: callID})
	if err != nil || out.Result.Status != card.StatusSuccess || string(out.Result.Result) != `{"done":"yes"}` {
		t.Fatalf("the call's result: %v, %+v", err, out)
	}
}

// TestInvalidHeaderAnnotationSkipped: a registry entry whose parameters
// carry an x-mcp-header annotation MCP refuses (here on a property with no
// type) is left out of the tool list and logged; the bridge goes on
// serving the other tools. mcp-go panics on such a tool, which used to take
// the bridge down at every start while the entry was registered.
func TestInvalidHeaderAnnotationSkipped(t *testing.T) {
	f := startMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := f.m.Registry().Get(ctx, "demo", "echo")
	if err != nil {
		t.Fatal(err)
	}
	bad := *e
	bad.ToolName = "echo_bad_header"
	bad.Parameters = json.RawMessage(`{"type":"object","properties":{"q":{"x-mcp-header":"Q"}}}`)
	if _, err := f.m.Registry().Put(ctx, &bad); err != nil {
		t.Fatal(err)
	}
	mcptest.Each(t, func(t *testing.T, tr mcptest.Transport, ver string) {
		cs, _ := f.connect(t, tr, ver, f.demo, nil)
		names := mcptest.ToolNames(t, cs)
		if _, ok := names["echo"]; !ok {
			t.Fatalf("echo is not listed beside the invalid entry: %v", names)
		}
		if _, ok := names["echo_bad_header"]; ok {
			t.Fatal("the entry with an invalid x-mcp-header annotation is listed")
		}
	})
}
