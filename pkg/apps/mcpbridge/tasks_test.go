package mcpbridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	mcptransport "github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// taskMesh is a mesh without the gate serving "slow", an async tool
// (registry option "async": true) that returns when the test releases it,
// and the bearer tokens of two agents (only decoded: no gate).
type taskMesh struct {
	m               *mesh.Mesh
	release         chan string
	tester, another string
}

func startTaskMesh(t *testing.T) *taskMesh {
	t.Helper()
	ctx := context.Background()
	tm := &taskMesh{release: make(chan string)}
	slow := worker.Tool{Name: "slow", Description: "returns what the test releases it with",
		Options: registry.Options{TimeoutSeconds: 300, Extra: map[string]json.RawMessage{mcpbridge.AsyncOption: json.RawMessage(`true`)}},
		Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
			select {
			case v := <-tm.release:
				return worker.OK(map[string]any{"done": v}), nil
			case <-ctx.Done():
				return worker.Result{}, ctx.Err()
			}
		}}
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Tools: []worker.Tool{slow}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	tm.m = m
	key, _, err := mandate.NewKeyDir(t.TempDir()).Ensure(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		sub string
		tok *string
	}{{"tester", &tm.tester}, {"another", &tm.another}} {
		*a.tok, err = mandate.Issue(key, mandate.Claims{Subject: a.sub, ExpiresAt: time.Now().Add(time.Hour).Unix(),
			Mandate: mandate.Grant{PolicySet: `permit(principal, action == Action::"slow", resource);`}}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
	}
	return tm
}

// taskBridge is a running bridge with an mcp-go client (2025-11-25).
type taskBridge struct {
	b    *mcpbridge.Bridge
	c    *mcpclient.Client
	stop func()
	seq  atomic.Int64
}

// serve starts a new bridge over tr and connects mcp-go's client to it
// as the agent of token. stop ends both (a bridge restart).
func (tm *taskMesh) serve(t *testing.T, tr transport, token string) *taskBridge {
	t.Helper()
	return serveTasks(t, tm.m, tr, token)
}

// serveTasks is taskMesh.serve on any mesh.
func serveTasks(t *testing.T, m *mesh.Mesh, tr transport, token string) *taskBridge {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b, err := mcpbridge.New(mcpbridge.Config{Conn: m.Conn(), Project: "demo", CallTimeout: time.Minute, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
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
		ClientInfo: mcp.Implementation{Name: "task-test", Version: "1"}}}); err != nil {
		t.Fatalf("initialize over %s: %v", tr, err)
	}
	tb := &taskBridge{b: b, c: c}
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

// rpc sends a raw request (the typed client cannot send a task-augmented
// tools/call) and returns its result, or fails the test on an error. Its
// ids are strings, apart from the client's numbers: the stdio transport
// forgets an id's waiter after delivering its response, and would forget
// a new request's waiter if that reused the id.
func (tb *taskBridge) rpc(t *testing.T, method string, params any) json.RawMessage {
	t.Helper()
	res, rerr := tb.rpcErr(t, method, params)
	if rerr != nil {
		t.Fatalf("%s: error %d %s", method, rerr.Code, rerr.Message)
	}
	return res
}

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

// startTask calls slow as a task and returns the task.
func (tb *taskBridge) startTask(t *testing.T) mcp.Task {
	t.Helper()
	return tb.startTaskOf(t, "slow", map[string]any{})
}

// startTaskOf calls a tool as a task and returns the task.
func (tb *taskBridge) startTaskOf(t *testing.T, tool string, args any) mcp.Task {
	t.Helper()
	raw := tb.rpc(t, "tools/call", map[string]any{"name": tool, "arguments": args, "task": map[string]any{"ttl": 60000}})
	var r mcp.CreateTaskResult
	if err := json.Unmarshal(raw, &r); err != nil || !strings.HasPrefix(r.Task.TaskId, "utp1.") || r.Task.Status != mcp.TaskStatusWorking {
		t.Fatalf("tools/call as a task = %s (%v)", raw, err)
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

func (tb *taskBridge) result(t *testing.T, id string) *mcp.TaskResultResult {
	t.Helper()
	r, err := tb.resultErr(id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// resultErr is tasks/result (for a goroutine: no t.Fatal).
func (tb *taskBridge) resultErr(id string) (*mcp.TaskResultResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := tb.c.TaskResult(ctx, mcp.TaskResultRequest{Params: mcp.TaskResultParams{TaskId: id}})
	if err != nil {
		return nil, fmt.Errorf("tasks/result %s: %w", id, err)
	}
	return r, nil
}

// awaitResult runs tasks/result in the background, then release.
func (tb *taskBridge) awaitResult(t *testing.T, id string, release func()) *mcp.TaskResultResult {
	t.Helper()
	type out struct {
		r   *mcp.TaskResultResult
		err error
	}
	got := make(chan out, 1)
	go func() { r, err := tb.resultErr(id); got <- out{r, err} }()
	release()
	o := <-got
	if o.err != nil {
		t.Fatal(o.err)
	}
	return o.r
}

func eachTransport(t *testing.T, fn func(t *testing.T, tr transport)) {
	for _, tr := range []transport{stdio, httpTrp} {
		t.Run(string(tr), func(t *testing.T) { fn(t, tr) })
	}
}

// TestTaskThroughToResult: an async tool is offered as a task; a
// task-augmented call answers with the task at once, tasks/get says
// working, tasks/list lists it, and tasks/result waits for the UTP result.
func TestTaskThroughToResult(t *testing.T) {
	tm := startTaskMesh(t)
	eachTransport(t, func(t *testing.T, tr transport) {
		tb := tm.serve(t, tr, tm.tester)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		lr, err := tb.c.ListTools(ctx, mcp.ListToolsRequest{})
		if err != nil || len(lr.Tools) != 1 || lr.Tools[0].Execution == nil || lr.Tools[0].Execution.TaskSupport != mcp.TaskSupportOptional {
			t.Fatalf("tools/list = %+v, %v; want slow with taskSupport optional", lr, err)
		}
		task := tb.startTask(t)
		if g := tb.get(t, task.TaskId); g.Status != mcp.TaskStatusWorking || g.PollInterval == nil {
			t.Fatalf("tasks/get before the result = %+v", g)
		}
		lt, err := tb.c.ListTasks(ctx, mcp.ListTasksRequest{})
		if err != nil || len(lt.Tasks) != 1 || lt.Tasks[0].TaskId != task.TaskId {
			t.Fatalf("tasks/list = %+v, %v", lt, err)
		}
		r := tb.awaitResult(t, task.TaskId, func() { tm.release <- "through " + string(tr) })
		if r.IsError || !strings.Contains(textContent(r.Content), `"done":"through `+string(tr)+`"`) {
			t.Fatalf("tasks/result = %+v", r)
		}
		if rel, _ := r.Meta.AdditionalFields[mcp.RelatedTaskMetaKey].(map[string]any); rel["taskId"] != task.TaskId {
			t.Fatalf("tasks/result _meta = %v", r.Meta.AdditionalFields)
		}
		if g := tb.get(t, task.TaskId); g.Status != mcp.TaskStatusCompleted {
			t.Fatalf("tasks/get after the result = %+v", g)
		}
		// tasks/result consumed the result: its inbox entry is acknowledged.
		turn, callID, err := mcpbridge.ParseTaskID(task.TaskId)
		if err != nil {
			t.Fatal(err)
		}
		ac, err := agent.New(tm.m.Conn(), agent.Config{Project: "demo", AgentID: "tester", Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer ac.Close()
		st, err := ac.Resume(ctx, turn)
		if err != nil || !slices.ContainsFunc(st.Finished, func(c agent.CallState) bool { return c.ToolCallID == callID }) {
			t.Fatalf("the turn after tasks/result: %+v, %v", st, err)
		}
		// Another agent does not see the task.
		other := tm.serve(t, tr, tm.another)
		if _, rerr := other.rpcErr(t, "tasks/get", map[string]any{"taskId": task.TaskId}); rerr == nil || !strings.Contains(rerr.Message, "task not found") {
			t.Fatalf("tasks/get by another agent: %+v", rerr)
		}
		if _, rerr := tb.rpcErr(t, "tasks/get", map[string]any{"taskId": "nonsense"}); rerr == nil || !strings.Contains(rerr.Message, "task ids look like utp1.") {
			t.Fatalf("tasks/get of a made-up id: %+v", rerr)
		}
	})
}

// TestTaskSurvivesBridgeRestart: a task started on one bridge is read and
// finished through a new bridge instance (the first one stopped), since
// its id is its UTP call and its state is in the card store.
func TestTaskSurvivesBridgeRestart(t *testing.T) {
	tm := startTaskMesh(t)
	eachTransport(t, func(t *testing.T, tr transport) {
		first := tm.serve(t, tr, tm.tester)
		task := first.startTask(t)
		first.stop()
		second := tm.serve(t, tr, tm.tester)
		if g := second.get(t, task.TaskId); g.Status != mcp.TaskStatusWorking {
			t.Fatalf("tasks/get on the new bridge = %+v", g)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if lt, err := second.c.ListTasks(ctx, mcp.ListTasksRequest{}); err != nil || len(lt.Tasks) != 0 {
			t.Fatalf("tasks/list of the new session = %+v, %v; want none (the old session's task is not its)", lt, err)
		}
		if r := second.awaitResult(t, task.TaskId, func() { tm.release <- "after restart" }); r.IsError || !strings.Contains(textContent(r.Content), `"done":"after restart"`) {
			t.Fatalf("tasks/result on the new bridge = %+v", r)
		}
		if g := second.get(t, task.TaskId); g.Status != mcp.TaskStatusCompleted {
			t.Fatalf("tasks/get after the result = %+v", g)
		}
	})
}

// TestTaskCancel: tasks/cancel cancels the UTP call with cancel_tool_call;
// the task ends cancelled and tasks/result is the canceled result.
func TestTaskCancel(t *testing.T) {
	tm := startTaskMesh(t)
	eachTransport(t, func(t *testing.T, tr transport) {
		tb := tm.serve(t, tr, tm.tester)
		task := tb.startTask(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cr, err := tb.c.CancelTask(ctx, mcp.CancelTaskRequest{Params: mcp.CancelTaskParams{TaskId: task.TaskId}})
		if err != nil || cr.Status != mcp.TaskStatusCancelled {
			t.Fatalf("tasks/cancel = %+v, %v", cr, err)
		}
		r := tb.result(t, task.TaskId)
		if !r.IsError || !strings.HasPrefix(textContent(r.Content), "canceled: ") {
			t.Fatalf("tasks/result of the canceled task = %+v", r)
		}
		if g := tb.get(t, task.TaskId); g.Status != mcp.TaskStatusCancelled {
			t.Fatalf("tasks/get = %+v", g)
		}
		if _, rerr := tb.rpcErr(t, "tasks/cancel", map[string]any{"taskId": task.TaskId}); rerr == nil || !strings.Contains(rerr.Message, "already ended") {
			t.Fatalf("tasks/cancel of an ended task: %+v", rerr)
		}
	})
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
