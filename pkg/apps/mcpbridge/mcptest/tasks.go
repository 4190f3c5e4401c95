package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	mcptransport "github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
)

// TasksVersion is the protocol version of a TaskClient: the one with the
// initialize handshake and tasks.
const TasksVersion = "2025-11-25"

// TaskClient is a bridge served to mark3labs/mcp-go's client, initialized
// with TasksVersion: the host side of task-augmented calls.
type TaskClient struct {
	// C is the client, for the typed requests (tools/list, tools/call,
	// tasks/list, tasks/cancel).
	C    *mcpclient.Client
	stop func()
	seq  atomic.Int64
}

// ServeTasks serves b over tr and connects a TaskClient to it as the
// agent of the mandate token. ServeTasks owns b: Stop (or the test's end)
// closes the client, the server and b — a bridge restart, when the test
// then serves a new bridge.
func ServeTasks(t *testing.T, b *mcpbridge.Bridge, tr Transport, token string) *TaskClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var ct mcptransport.Interface
	var stops []func()
	switch tr {
	case Stdio:
		id, err := mcpbridge.NewIdentity("", token)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		cr, sw := io.Pipe()
		sr, cw := io.Pipe()
		done := make(chan error, 1)
		go func() { done <- b.ServeStdio(ctx, id, sr, sw) }()
		stops = append(stops, func() { _ = cw.Close(); _ = sw.Close(); cancel(); <-done })
		ct = mcptransport.NewIO(cr, cw, io.NopCloser(strings.NewReader("")))
	case HTTP:
		hs := httptest.NewServer(b.HTTPHandler())
		stops = append(stops, hs.Close)
		var err error
		ct, err = mcptransport.NewStreamableHTTP(hs.URL+mcpbridge.HTTPPath, mcptransport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
		if err != nil {
			hs.Close()
			cancel()
			t.Fatal(err)
		}
	default:
		cancel()
		t.Fatalf("unknown transport %q", tr)
	}
	c := mcpclient.NewClient(ct, mcpclient.WithProtocolVersion(TasksVersion))
	tc := &TaskClient{C: c}
	var once atomic.Bool
	tc.stop = func() {
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
	t.Cleanup(tc.stop)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ictx, icancel := context.WithTimeout(ctx, Timeout)
	defer icancel()
	if _, err := c.Initialize(ictx, mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: TasksVersion,
		ClientInfo: mcp.Implementation{Name: "mcptest-tasks", Version: "1"}}}); err != nil {
		t.Fatalf("initialize over %s: %v", tr, err)
	}
	return tc
}

// Stop ends the client, the server and the bridge; a second Stop does
// nothing.
func (tc *TaskClient) Stop() { tc.stop() }

// RPC sends a raw request (the typed client cannot send a task-augmented
// tools/call) and returns its result, or fails the test on an error. Its
// ids are strings, apart from the client's numbers: the stdio transport
// forgets an id's waiter after delivering its response, and would forget
// a new request's waiter if that reused the id.
func (tc *TaskClient) RPC(t *testing.T, method string, params any) json.RawMessage {
	t.Helper()
	res, rerr := tc.RPCErr(t, method, params)
	if rerr != nil {
		t.Fatalf("%s: error %d %s", method, rerr.Code, rerr.Message)
	}
	return res
}

// RPCErr is RPC returning the JSON-RPC error instead of failing the test
// on one (a transport failure still fails it).
func (tc *TaskClient) RPCErr(t *testing.T, method string, params any) (json.RawMessage, *mcp.JSONRPCErrorDetails) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	resp, err := tc.C.GetTransport().SendRequest(ctx, mcptransport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION,
		ID: mcp.NewRequestId(fmt.Sprintf("raw-%d", tc.seq.Add(1))), Method: method, Params: params})
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return resp.Result, resp.Error
}

// StartTask calls tool with args as a task and returns the task, which
// must be working with a bridge task id ("utp1.…").
func (tc *TaskClient) StartTask(t *testing.T, tool string, args any) mcp.Task {
	t.Helper()
	raw := tc.RPC(t, "tools/call", map[string]any{"name": tool, "arguments": args, "task": map[string]any{"ttl": 60000}})
	var r mcp.CreateTaskResult
	if err := json.Unmarshal(raw, &r); err != nil || !strings.HasPrefix(r.Task.TaskId, "utp1.") || r.Task.Status != mcp.TaskStatusWorking {
		t.Fatalf("tools/call as a task = %s (%v)", raw, err)
	}
	return r.Task
}

// Get is tasks/get of id.
func (tc *TaskClient) Get(t *testing.T, id string) mcp.GetTaskResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	r, err := tc.C.GetTask(ctx, mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: id}})
	if err != nil {
		t.Fatalf("tasks/get %s: %v", id, err)
	}
	return *r
}

// Result is tasks/result of id.
func (tc *TaskClient) Result(t *testing.T, id string) *mcp.TaskResultResult {
	t.Helper()
	r, err := tc.ResultErr(id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ResultErr is tasks/result of id returning its error (for a goroutine:
// no t.Fatal).
func (tc *TaskClient) ResultErr(id string) (*mcp.TaskResultResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	r, err := tc.C.TaskResult(ctx, mcp.TaskResultRequest{Params: mcp.TaskResultParams{TaskId: id}})
	if err != nil {
		return nil, fmt.Errorf("tasks/result %s: %w", id, err)
	}
	return r, nil
}

// AwaitResult sends tasks/result of id in the background, then runs
// release (which lets the task end), and returns the result.
func (tc *TaskClient) AwaitResult(t *testing.T, id string, release func()) *mcp.TaskResultResult {
	t.Helper()
	type out struct {
		r   *mcp.TaskResultResult
		err error
	}
	got := make(chan out, 1)
	go func() { r, err := tc.ResultErr(id); got <- out{r, err} }()
	release()
	o := <-got
	if o.err != nil {
		t.Fatal(o.err)
	}
	return o.r
}

// TextContent is the text of an mcp-go result's content, joined.
func TextContent(cs []mcp.Content) string {
	var b strings.Builder
	for _, c := range cs {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
