package mcpbridge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
)

// The bridge answers the tasks/* methods and task-augmented tools/calls
// itself, before mcp-go sees them: mcp-go keeps tasks in a map of its own
// server (no store can be plugged in), so its tasks would not outlive the
// bridge. A task here is a UTP call (TaskID), read from the card store and
// the inbox on every request, so any bridge of the project answers for it.
//
// Only requests of the pre-2026-07-28 era are intercepted: 2026-07-28
// removed tasks/list and tasks/result, and its clients are offered no
// task support (tools/list sets execution.taskSupport for the older era
// only), so their calls of async tools run as ordinary calls.

// rpcRequest is the part of a JSON-RPC request the bridge reads.
type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// taskCallParams are the tools/call params of a task-augmented call.
type taskCallParams struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Task      *mcp.TaskParams `json:"task"`
	Meta      *mcp.Meta       `json:"_meta"`
}

// intercepted returns the request when the bridge answers msg itself: a
// tasks/* request, or a tools/call with "task" of an async tool, of the
// pre-2026-07-28 era.
func (b *Bridge) intercepted(ctx context.Context, msg []byte) (*rpcRequest, bool) {
	var req rpcRequest
	if json.Unmarshal(msg, &req) != nil || len(req.ID) == 0 || string(req.ID) == "null" {
		return nil, false
	}
	var p struct {
		Meta *mcp.Meta       `json:"_meta"`
		Task json.RawMessage `json:"task"`
		Name string          `json:"name"`
	}
	_ = json.Unmarshal(req.Params, &p)
	if mcp.IsModernProtocol(p.Meta.ProtocolVersion()) {
		return nil, false
	}
	switch mcp.MCPMethod(req.Method) {
	case mcp.MethodTasksGet, mcp.MethodTasksResult, mcp.MethodTasksList, mcp.MethodTasksCancel:
		return &req, true
	case mcp.MethodToolsCall:
		if len(p.Task) == 0 || string(p.Task) == "null" {
			return nil, false
		}
		if !b.asyncTool(p.Name) {
			b.syncTools(ctx) // perhaps registered since the last read
		}
		return &req, b.asyncTool(p.Name)
	}
	return nil, false
}

// asyncTool reports whether the served tool name is async.
func (b *Bridge) asyncTool(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.async[name]
}

// answer serves an intercepted request for the caller id in the MCP
// session (its id; "" for none) and returns the JSON-RPC response.
func (b *Bridge) answer(ctx context.Context, id Identity, session, protocol string, req *rpcRequest) []byte {
	var rid any
	_ = json.Unmarshal(req.ID, &rid)
	md := map[string]any{"session_id": session, "request_id": fmt.Sprint(rid)}
	if protocol != "" {
		md["protocol_version"] = protocol
	}
	raw, _ := json.Marshal(md)
	ci := callInfo{id: id, turn: b.turnFor(session, id), metadata: raw}
	result, code, err := b.serveTask(ctx, ci, req)
	var resp any
	if err != nil {
		b.log.Info("mcp: task request refused", "method", req.Method, "err", err)
		resp = mcp.JSONRPCError{JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(rid), Error: mcp.NewJSONRPCErrorDetails(code, err.Error(), nil)}
	} else {
		resp = mcp.NewJSONRPCResultResponse(mcp.NewRequestId(rid), result)
	}
	out, mErr := json.Marshal(resp)
	if mErr != nil {
		out, _ = json.Marshal(mcp.JSONRPCError{JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(rid),
			Error: mcp.NewJSONRPCErrorDetails(mcp.INTERNAL_ERROR, "encode the response: "+mErr.Error(), nil)})
	}
	return out
}

// serveTask runs one intercepted request; on failure it returns the
// JSON-RPC error code and the error.
func (b *Bridge) serveTask(ctx context.Context, ci callInfo, req *rpcRequest) (any, int, error) {
	var p struct {
		TaskID string `json:"taskId"`
	}
	if mcp.MCPMethod(req.Method) != mcp.MethodTasksList && mcp.MCPMethod(req.Method) != mcp.MethodToolsCall {
		if err := json.Unmarshal(req.Params, &p); err != nil || p.TaskID == "" {
			return nil, mcp.INVALID_PARAMS, fmt.Errorf("%s needs params {\"taskId\": \"…\"}, the id tools/call returned with the task", req.Method)
		}
	}
	var turn, callID string
	if p.TaskID != "" {
		var err error
		if turn, callID, err = ParseTaskID(p.TaskID); err != nil {
			return nil, mcp.INVALID_PARAMS, err
		}
	}
	fail := func(err error) (any, int, error) {
		if errors.Is(err, ErrTaskNotFound) || errors.Is(err, ErrTaskTerminal) || errors.Is(err, ErrTaskID) {
			return nil, mcp.INVALID_PARAMS, err
		}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, mcp.REQUEST_INTERRUPTED, err
		}
		return nil, mcp.INTERNAL_ERROR, err
	}
	switch mcp.MCPMethod(req.Method) {
	case mcp.MethodToolsCall:
		var cp taskCallParams
		if err := json.Unmarshal(req.Params, &cp); err != nil {
			return nil, mcp.INVALID_PARAMS, fmt.Errorf("tools/call params: %v", err)
		}
		args, err := argumentsOf(mcp.CallToolRequest{Params: mcp.CallToolParams{Name: cp.Name, RawArguments: cp.Arguments}})
		if err != nil {
			return nil, mcp.INVALID_PARAMS, err
		}
		res, err := b.createTask(ctx, ci, cp.Name, args, cp.Task.TTL)
		if err != nil {
			return fail(err)
		}
		return res, 0, nil
	case mcp.MethodTasksGet:
		st, err := b.taskOf(ctx, ci, turn, callID)
		if err != nil {
			return fail(err)
		}
		return mcp.NewGetTaskResult(st.task), 0, nil
	case mcp.MethodTasksResult:
		st, err := b.waitTask(ctx, ci, turn, callID)
		if err != nil {
			return fail(err)
		}
		return b.taskResult(ctx, ci, st), 0, nil
	case mcp.MethodTasksList:
		tasks, err := b.listTasks(ctx, ci)
		if err != nil {
			return fail(err)
		}
		return mcp.NewListTasksResult(tasks), 0, nil
	case mcp.MethodTasksCancel:
		st, err := b.cancelTask(ctx, ci, turn, callID)
		if err != nil {
			return fail(err)
		}
		return mcp.NewCancelTaskResult(st.task), 0, nil
	}
	return nil, mcp.METHOD_NOT_FOUND, fmt.Errorf("method %s not found", req.Method)
}

// lockedWriter makes each Write one atomic message on a shared stream:
// mcp-go writes a whole message per Write, and so does the bridge.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// stdioFilter passes stdio lines to mcp-go, except the requests the
// bridge answers itself (each in its own goroutine: tasks/result waits).
type stdioFilter struct {
	b       *Bridge
	id      Identity
	out     *lockedWriter
	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup
}

// run copies r to next line by line until r ends, answering intercepted
// requests on f.out.
func (f *stdioFilter) run(ctx context.Context, r io.Reader, next io.Writer) error {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			if req, ok := f.b.intercepted(ctx, line); ok {
				f.start(ctx, req)
			} else if _, werr := next.Write(line); werr != nil {
				return werr
			}
		}
		if err != nil {
			return err
		}
	}
}

// start answers req in a goroutine, unless the filter stopped.
func (f *stdioFilter) start(ctx context.Context, req *rpcRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		resp := f.b.answer(ctx, f.id, f.b.session, "", req)
		_, _ = f.out.Write(append(resp, '\n'))
	}()
}

// stop waits for the running answers (their ctx is done) and starts no
// more.
func (f *stdioFilter) stop() {
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
	f.wg.Wait()
}
