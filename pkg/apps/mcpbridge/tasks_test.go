package mcpbridge_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge/mcptest"
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
	slow := slowTool(tm.release)
	slow.Options = registry.Options{TimeoutSeconds: 300, Extra: map[string]json.RawMessage{mcpbridge.AsyncOption: json.RawMessage(`true`)}}
	tm.m = plainMesh(t, slow)
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

// slowTool is "slow", a tool that returns {"done": v} when the test
// sends v on release (or ends with its call's context).
func slowTool(release <-chan string) worker.Tool {
	return worker.Tool{Name: "slow", Description: "returns what the test releases it with",
		Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
			select {
			case v := <-release:
				return worker.OK(map[string]any{"done": v}), nil
			case <-ctx.Done():
				return worker.Result{}, ctx.Err()
			}
		}}
}

// plainMesh starts a mesh without the Cedar gate serving tools; it stops
// when the test ends.
func plainMesh(t *testing.T, tools ...worker.Tool) *mesh.Mesh {
	t.Helper()
	m, err := mesh.Start(context.Background(), mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Tools: tools, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	return m
}

// serve starts a new bridge over tr and connects mcp-go's client to it
// as the agent of token. Stop ends both (a bridge restart).
func (tm *taskMesh) serve(t *testing.T, tr mcptest.Transport, token string) *mcptest.TaskClient {
	t.Helper()
	return serveTasks(t, tm.m, tr, token)
}

// serveTasks is taskMesh.serve on any mesh.
func serveTasks(t *testing.T, m *mesh.Mesh, tr mcptest.Transport, token string) *mcptest.TaskClient {
	t.Helper()
	b, err := mcpbridge.New(mcpbridge.Config{Conn: m.Conn(), Project: "demo", CallTimeout: time.Minute, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return mcptest.ServeTasks(t, b, tr, token)
}

// TestTaskThroughToResult: an async tool is offered as a task; a
// task-augmented call answers with the task at once, tasks/get says
// working, tasks/list lists it, and tasks/result waits for the UTP result.
func TestTaskThroughToResult(t *testing.T) {
	tm := startTaskMesh(t)
	mcptest.EachTransport(t, func(t *testing.T, tr mcptest.Transport) {
		tb := tm.serve(t, tr, tm.tester)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		lr, err := tb.C.ListTools(ctx, mcp.ListToolsRequest{})
		if err != nil || len(lr.Tools) != 1 || lr.Tools[0].Execution == nil || lr.Tools[0].Execution.TaskSupport != mcp.TaskSupportOptional {
			t.Fatalf("tools/list = %+v, %v; want slow with taskSupport optional", lr, err)
		}
		task := tb.StartTask(t, "slow", map[string]any{})
		if g := tb.Get(t, task.TaskId); g.Status != mcp.TaskStatusWorking || g.PollInterval == nil {
			t.Fatalf("tasks/get before the result = %+v", g)
		}
		lt, err := tb.C.ListTasks(ctx, mcp.ListTasksRequest{})
		if err != nil || len(lt.Tasks) != 1 || lt.Tasks[0].TaskId != task.TaskId {
			t.Fatalf("tasks/list = %+v, %v", lt, err)
		}
		r := tb.AwaitResult(t, task.TaskId, func() { tm.release <- "through " + string(tr) })
		if r.IsError || !strings.Contains(mcptest.TextContent(r.Content), `"done":"through `+string(tr)+`"`) {
			t.Fatalf("tasks/result = %+v", r)
		}
		if rel, _ := r.Meta.AdditionalFields[mcp.RelatedTaskMetaKey].(map[string]any); rel["taskId"] != task.TaskId {
			t.Fatalf("tasks/result _meta = %v", r.Meta.AdditionalFields)
		}
		if g := tb.Get(t, task.TaskId); g.Status != mcp.TaskStatusCompleted {
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
		if _, rerr := other.RPCErr(t, "tasks/get", map[string]any{"taskId": task.TaskId}); rerr == nil || !strings.Contains(rerr.Message, "task not found") {
			t.Fatalf("tasks/get by another agent: %+v", rerr)
		}
		if _, rerr := tb.RPCErr(t, "tasks/get", map[string]any{"taskId": "nonsense"}); rerr == nil || !strings.Contains(rerr.Message, "task ids look like utp1.") {
			t.Fatalf("tasks/get of a made-up id: %+v", rerr)
		}
	})
}

// TestTaskSurvivesBridgeRestart: a task started on one bridge is read and
// finished through a new bridge instance (the first one stopped), since
// its id is its UTP call and its state is in the card store.
func TestTaskSurvivesBridgeRestart(t *testing.T) {
	tm := startTaskMesh(t)
	mcptest.EachTransport(t, func(t *testing.T, tr mcptest.Transport) {
		first := tm.serve(t, tr, tm.tester)
		task := first.StartTask(t, "slow", map[string]any{})
		first.Stop()
		second := tm.serve(t, tr, tm.tester)
		if g := second.Get(t, task.TaskId); g.Status != mcp.TaskStatusWorking {
			t.Fatalf("tasks/get on the new bridge = %+v", g)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if lt, err := second.C.ListTasks(ctx, mcp.ListTasksRequest{}); err != nil || len(lt.Tasks) != 0 {
			t.Fatalf("tasks/list of the new session = %+v, %v; want none (the old session's task is not its)", lt, err)
		}
		if r := second.AwaitResult(t, task.TaskId, func() { tm.release <- "after restart" }); r.IsError || !strings.Contains(mcptest.TextContent(r.Content), `"done":"after restart"`) {
			t.Fatalf("tasks/result on the new bridge = %+v", r)
		}
		if g := second.Get(t, task.TaskId); g.Status != mcp.TaskStatusCompleted {
			t.Fatalf("tasks/get after the result = %+v", g)
		}
	})
}

// TestTaskCancel: tasks/cancel cancels the UTP call with cancel_tool_call;
// the task ends cancelled and tasks/result is the canceled result.
func TestTaskCancel(t *testing.T) {
	tm := startTaskMesh(t)
	mcptest.EachTransport(t, func(t *testing.T, tr mcptest.Transport) {
		tb := tm.serve(t, tr, tm.tester)
		task := tb.StartTask(t, "slow", map[string]any{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cr, err := tb.C.CancelTask(ctx, mcp.CancelTaskRequest{Params: mcp.CancelTaskParams{TaskId: task.TaskId}})
		if err != nil || cr.Status != mcp.TaskStatusCancelled {
			t.Fatalf("tasks/cancel = %+v, %v", cr, err)
		}
		r := tb.Result(t, task.TaskId)
		if !r.IsError || !strings.HasPrefix(mcptest.TextContent(r.Content), "canceled: ") {
			t.Fatalf("tasks/result of the canceled task = %+v", r)
		}
		if g := tb.Get(t, task.TaskId); g.Status != mcp.TaskStatusCancelled {
			t.Fatalf("tasks/get = %+v", g)
		}
		if _, rerr := tb.RPCErr(t, "tasks/cancel", map[string]any{"taskId": task.TaskId}); rerr == nil || !strings.Contains(rerr.Message, "already ended") {
			t.Fatalf("tasks/cancel of an ended task: %+v", rerr)
		}
	})
}
