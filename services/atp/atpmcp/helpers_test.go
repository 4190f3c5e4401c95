package atpmcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	mcptransport "github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
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
	return &fixture{h: h, m: h.Mesh}
}

// issue signs a mandate of the harness's project for agentID.
func (f *fixture) issue(t *testing.T, agentID, policies string) string {
	t.Helper()
	return f.h.Mandate(agentID, policies)
}

// newBridge is a bridge on m; it closes when the test ends.
func newBridge(t *testing.T, m *mesh.Mesh) *mcpbridge.Bridge {
	t.Helper()
	b, err := mcpbridge.New(mcpbridge.Config{Conn: m.Conn(), Project: atptest.Project, CallTimeout: time.Minute, Logger: atptest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// transport is how a test client reaches the bridge.
type transport string

const (
	stdio   transport = "stdio"
	httpTrp transport = "http"
)

// bearer adds the mandate as the bearer token of every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// connect serves a new bridge over tr and connects an official-SDK
// client with protocol version ver, calling as the mandate token. elicit
// answers elicitations (nil: the client does not declare elicitation).
func (f *fixture) connect(t *testing.T, tr transport, ver, token string, elicit func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error)) (*sdk.ClientSession, *mcpbridge.Bridge) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b := newBridge(t, f.m)
	var ct sdk.Transport
	switch tr {
	case stdio:
		id, err := mcpbridge.NewIdentity("", token)
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
	case httpTrp:
		hs := httptest.NewServer(b.HTTPHandler())
		t.Cleanup(hs.Close)
		ct = &sdk.StreamableClientTransport{Endpoint: hs.URL + mcpbridge.HTTPPath,
			HTTPClient: &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}}, DisableStandaloneSSE: true}
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "atp-test", Version: "1"}, &sdk.ClientOptions{ElicitationHandler: elicit})
	cs, err := c.Connect(ctx, ct, &sdk.ClientSessionOptions{ProtocolVersion: ver})
	if err != nil {
		t.Fatalf("connect over %s with %s: %v", tr, ver, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, b
}

// each runs fn for both transports and both protocol versions.
func each(t *testing.T, fn func(t *testing.T, tr transport, ver string)) {
	for _, tr := range []transport{stdio, httpTrp} {
		for _, ver := range []string{"2026-07-28", "2025-11-25"} {
			t.Run(string(tr)+"/"+ver, func(t *testing.T) { fn(t, tr, ver) })
		}
	}
}

// eachTransport runs fn for both transports.
func eachTransport(t *testing.T, fn func(t *testing.T, tr transport)) {
	for _, tr := range []transport{stdio, httpTrp} {
		t.Run(string(tr), func(t *testing.T) { fn(t, tr) })
	}
}

func callTool(t *testing.T, cs *sdk.ClientSession, name string, args any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

func text(r *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func structured(t *testing.T, r *sdk.CallToolResult) map[string]any {
	t.Helper()
	raw, _ := json.Marshal(r.StructuredContent)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("structuredContent %s: %v", raw, err)
	}
	return m
}

// taskBridge is a running bridge with an mcp-go client (2025-11-25).
type taskBridge struct {
	c    *mcpclient.Client
	stop func()
	seq  atomic.Int64
}

// serveTasks starts a new bridge on m over tr and connects mcp-go's client
// to it as the agent of token. stop ends both (a bridge restart).
func serveTasks(t *testing.T, m *mesh.Mesh, tr transport, token string) *taskBridge {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := newBridge(t, m)
	var ct mcptransport.Interface
	var stops []func()
	switch tr {
	case stdio:
		id, err := mcpbridge.NewIdentity("", token)
		if err != nil {
			t.Fatal(err)
		}
		cr, sw := io.Pipe()
		sr, cw := io.Pipe()
		done := make(chan error, 1)
		go func() { done <- b.ServeStdio(ctx, id, sr, sw) }()
		stops = append(stops, func() { _ = cw.Close(); _ = sw.Close(); cancel(); <-done })
		ct = mcptransport.NewIO(cr, cw, io.NopCloser(strings.NewReader("")))
	case httpTrp:
		hs := httptest.NewServer(b.HTTPHandler())
		stops = append(stops, hs.Close)
		var err error
		ct, err = mcptransport.NewStreamableHTTP(hs.URL+mcpbridge.HTTPPath, mcptransport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
		if err != nil {
			t.Fatal(err)
		}
	}
	c := mcpclient.NewClient(ct, mcpclient.WithProtocolVersion("2025-11-25"))
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ictx, icancel := context.WithTimeout(ctx, time.Minute)
	defer icancel()
	if _, err := c.Initialize(ictx, mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: "2025-11-25",
		ClientInfo: mcp.Implementation{Name: "atp-task-test", Version: "1"}}}); err != nil {
		t.Fatalf("initialize over %s: %v", tr, err)
	}
	tb := &taskBridge{c: c}
	var once atomic.Bool
	tb.stop = func() {
		if once.Swap(true) {
			return
		}
		_ = c.Close()
		for _, s := range stops {
			s()
		}
		cancel()
		_ = b.Close()
	}
	t.Cleanup(tb.stop)
	return tb
}

// rpcErr sends a raw request (the typed client cannot send a
// task-augmented tools/call) and returns its result and error. Its ids are
// strings, apart from the client's numbers.
func (tb *taskBridge) rpcErr(t *testing.T, method string, params any) (json.RawMessage, *mcp.JSONRPCErrorDetails) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := tb.c.GetTransport().SendRequest(ctx, mcptransport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION,
		ID: mcp.NewRequestId(fmt.Sprintf("raw-%d", tb.seq.Add(1))), Method: method, Params: params})
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return resp.Result, resp.Error
}

// startTaskOf calls a tool as a task and returns the task.
func (tb *taskBridge) startTaskOf(t *testing.T, tool string, args any) mcp.Task {
	t.Helper()
	raw, rerr := tb.rpcErr(t, "tools/call", map[string]any{"name": tool, "arguments": args, "task": map[string]any{"ttl": 60000}})
	var r mcp.CreateTaskResult
	if rerr != nil || json.Unmarshal(raw, &r) != nil || !strings.HasPrefix(r.Task.TaskId, "utp1.") || r.Task.Status != mcp.TaskStatusWorking {
		t.Fatalf("tools/call as a task = %s, %+v", raw, rerr)
	}
	return r.Task
}

func (tb *taskBridge) get(t *testing.T, id string) mcp.GetTaskResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := tb.c.GetTask(ctx, mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: id}})
	if err != nil {
		t.Fatalf("tasks/get %s: %v", id, err)
	}
	return *r
}

// awaitResult runs tasks/result in the background, then release.
func (tb *taskBridge) awaitResult(t *testing.T, id string, release func()) *mcp.TaskResultResult {
	t.Helper()
	type out struct {
		r   *mcp.TaskResultResult
		err error
	}
	got := make(chan out, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := tb.c.TaskResult(ctx, mcp.TaskResultRequest{Params: mcp.TaskResultParams{TaskId: id}})
		got <- out{r, err}
	}()
	release()
	o := <-got
	if o.err != nil {
		t.Fatalf("tasks/result %s: %v", id, o.err)
	}
	return o.r
}

func textContent(cs []mcp.Content) string {
	var b strings.Builder
	for _, c := range cs {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
