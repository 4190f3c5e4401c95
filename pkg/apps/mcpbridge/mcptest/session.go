package mcptest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
)

// Transport is how a test client reaches the bridge.
type Transport string

// The transports the bridge serves.
const (
	// Stdio is Bridge.ServeStdio over a pair of pipes.
	Stdio Transport = "stdio"
	// HTTP is Bridge.HTTPHandler on an httptest server, the mandate as
	// the bearer token of every request.
	HTTP Transport = "http"
)

// Transports are the transports the bridge serves, in the order Each runs
// them.
var Transports = []Transport{Stdio, HTTP}

// Versions are the MCP protocol versions the bridge serves, newest first.
var Versions = []string{"2026-07-28", "2025-11-25"}

// NoGateAgent is the agent a stdio session calls as when it has no
// mandate token (a mesh without the Cedar gate).
const NoGateAgent = "tester"

// Timeout bounds each request a helper sends.
const Timeout = time.Minute

// Each runs fn as a subtest "<transport>/<version>" for every transport and
// protocol version.
func Each(t *testing.T, fn func(t *testing.T, tr Transport, ver string)) {
	t.Helper()
	for _, tr := range Transports {
		for _, ver := range Versions {
			t.Run(string(tr)+"/"+ver, func(t *testing.T) { fn(t, tr, ver) })
		}
	}
}

// EachTransport runs fn as a subtest for every transport.
func EachTransport(t *testing.T, fn func(t *testing.T, tr Transport)) {
	t.Helper()
	for _, tr := range Transports {
		t.Run(string(tr), func(t *testing.T) { fn(t, tr) })
	}
}

// bearer adds the mandate as the bearer token of every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

// RoundTrip sends r with the Authorization header set.
func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

var _ http.RoundTripper = bearer{}

// Connect serves b over tr and connects an official-SDK client with
// protocol version ver, calling as the mandate token (stdio with no token:
// as NoGateAgent). opts are the client's options (nil: none); an HTTP
// client opens the standalone SSE stream only when opts has a
// ToolListChangedHandler. The session and the server end when the test
// does; b is not closed.
func Connect(t *testing.T, b *mcpbridge.Bridge, tr Transport, ver, token string, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	if opts == nil {
		opts = &sdk.ClientOptions{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var ct sdk.Transport
	switch tr {
	case Stdio:
		agentID := ""
		if token == "" {
			agentID = NoGateAgent
		}
		id, err := mcpbridge.NewIdentity(agentID, token)
		if err != nil {
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
		})
		ct = &sdk.IOTransport{Reader: cr, Writer: cw}
	case HTTP:
		hs := httptest.NewServer(b.HTTPHandler())
		t.Cleanup(hs.Close)
		ct = &sdk.StreamableClientTransport{Endpoint: hs.URL + mcpbridge.HTTPPath,
			HTTPClient: &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}}, DisableStandaloneSSE: opts.ToolListChangedHandler == nil}
	default:
		t.Fatalf("unknown transport %q", tr)
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "mcptest", Version: "1"}, opts)
	cs, err := c.Connect(ctx, ct, &sdk.ClientSessionOptions{ProtocolVersion: ver})
	if err != nil {
		t.Fatalf("connect over %s with %s: %v", tr, ver, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// Elicit answers an elicitation: the official SDK's ElicitationHandler.
type Elicit = func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error)

// Elicitation is client options that answer elicitations with elicit (nil:
// the client does not declare elicitation).
func Elicitation(elicit Elicit) *sdk.ClientOptions {
	return &sdk.ClientOptions{ElicitationHandler: elicit}
}

// Answer is an Elicit that appends each request's message to asked (when
// asked is not nil) and answers res.
func Answer(res *sdk.ElicitResult, asked *[]string) Elicit {
	return func(_ context.Context, r *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
		if asked != nil {
			*asked = append(*asked, r.Params.Message)
		}
		return res, nil
	}
}

// Confirm is the answer a host gives to the bridge's confirmation form:
// accept with {"confirm": yes}, plus {"reason": reason} when reason is
// not empty.
func Confirm(yes bool, reason string) *sdk.ElicitResult {
	content := map[string]any{"confirm": yes}
	if reason != "" {
		content["reason"] = reason
	}
	return &sdk.ElicitResult{Action: "accept", Content: content}
}

// CallTool calls the tool name with args and fails the test on a protocol
// error (a tool error is a result with IsError).
func CallTool(t *testing.T, cs *sdk.ClientSession, name string, args any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

// ToolNames is tools/list by name.
func ToolNames(t *testing.T, cs *sdk.ClientSession) map[string]*sdk.Tool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*sdk.Tool{}
	for _, tl := range res.Tools {
		out[tl.Name] = tl
	}
	return out
}

// Text is the text content of r, joined.
func Text(r *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// Structured is r's structuredContent as a JSON object.
func Structured(t *testing.T, r *sdk.CallToolResult) map[string]any {
	t.Helper()
	raw, _ := json.Marshal(r.StructuredContent)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("structuredContent %s: %v", raw, err)
	}
	return m
}
