package mcpbridge

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// AsyncOption is the registry option (an unknown key of Options, kept in
// Options.Extra) that marks a tool async: "async": true. Async tools are
// offered as MCP tasks (execution.taskSupport "optional").
const AsyncOption = "async"

// isAsync reports whether a registry entry is served as an MCP task: it
// says so (AsyncOption), or a registered Handoff owns it.
func (b *Bridge) isAsync(e *registry.Entry) bool {
	if _, ok := b.handoffOf(e.ToolName); ok {
		return true
	}
	var v bool
	return json.Unmarshal(e.Options.Extra[AsyncOption], &v) == nil && v
}

// taskPollInterval is the poll interval a task suggests to the client, and
// how often a waiting tasks/result re-reads the card store besides
// listening for the agent's wakeups.
const taskPollInterval = time.Second

// taskIDPrefix starts every task id the bridge issues.
const taskIDPrefix = "utp1."

// TaskID is the MCP task id of the UTP call (agentTurnID, toolCallID):
// "utp1.<base64url turn>.<base64url tool_call_id>". Any bridge of the
// project resolves it, so a task outlives the bridge that created it.
func TaskID(agentTurnID, toolCallID string) string {
	enc := base64.RawURLEncoding
	return taskIDPrefix + enc.EncodeToString([]byte(agentTurnID)) + "." + enc.EncodeToString([]byte(toolCallID))
}

// ParseTaskID returns the UTP call of a task id made by TaskID.
func ParseTaskID(id string) (agentTurnID, toolCallID string, err error) {
	rest, ok := strings.CutPrefix(id, taskIDPrefix)
	t, c, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return "", "", fmt.Errorf("%w: %q (task ids look like %s…, from the tools/call that created the task)", ErrTaskID, id, taskIDPrefix)
	}
	enc := base64.RawURLEncoding
	tb, err1 := enc.DecodeString(t)
	cb, err2 := enc.DecodeString(c)
	if err1 != nil || err2 != nil || len(tb) == 0 || len(cb) == 0 {
		return "", "", fmt.Errorf("%w: %q is damaged (task ids look like %s…, from the tools/call that created the task)", ErrTaskID, id, taskIDPrefix)
	}
	return string(tb), string(cb), nil
}

// taskState is where a task's UTP call stands, read from the card store
// and the inbox.
type taskState struct {
	task mcp.Task
	// final is the call whose result is the task's result (the call
	// itself, or the later call of a Handoff's task); nil while the task
	// runs.
	final *agent.CallState
	// call is the task's own call.
	call agent.CallState
	// handoff and handoffTask are set while the call waits for an
	// operator.
	handoff     Handoff
	handoffTask *HandoffTask
}

// createTask runs a task-augmented tools/call of an async tool: it
// dispatches the UTP call (card and command) and answers with the task at
// once. The call's card carries "task": true in its "mcp" metadata, which
// is how tasks/list finds it.
func (b *Bridge) createTask(ctx context.Context, ci callInfo, tool string, args json.RawMessage, ttl *int64) (*mcp.CreateTaskResult, error) {
	c, err := b.client(ci.id.AgentID)
	if err != nil {
		return nil, err
	}
	md, err := withTaskFlag(ci.metadata)
	if err != nil {
		return nil, err
	}
	callID := card.NewID()
	pd, err := c.Dispatch(ctx, agent.CallRequest{ToolName: tool, Arguments: args, AgentTurnID: ci.turn, ToolCallID: callID,
		Mandate: ci.id.Mandate, Metadata: map[string]json.RawMessage{MetadataKey: md}})
	if errors.Is(err, agent.ErrUnknownTool) {
		return nil, fmt.Errorf("%w (tools/list shows the tools)", err)
	} else if err != nil {
		return nil, fmt.Errorf("the call of %s failed before it reached a tool: %w", tool, err)
	}
	opts := []mcp.TaskOption{mcp.WithTaskPollInterval(taskPollInterval.Milliseconds()),
		mcp.WithTaskStatusMessage(fmt.Sprintf("%s runs as tool_call_id %s of turn %s", tool, pd.ToolCallID, pd.AgentTurnID))}
	if ttl != nil {
		opts = append(opts, mcp.WithTaskTTL(*ttl))
	}
	task := mcp.NewTask(TaskID(pd.AgentTurnID, pd.ToolCallID), opts...)
	meta := mcp.WithRelatedTask(task.TaskId)
	meta.AdditionalFields[MetaToolCallID] = pd.ToolCallID
	meta.AdditionalFields[MetaAgentTurnID] = pd.AgentTurnID
	return &mcp.CreateTaskResult{Result: mcp.Result{Meta: meta}, Task: task}, nil
}

// withTaskFlag adds "task": true to the "mcp" metadata object.
func withTaskFlag(md json.RawMessage) (json.RawMessage, error) {
	m := map[string]any{}
	if err := json.Unmarshal(md, &m); err != nil {
		return nil, fmt.Errorf("mcp metadata: %w", err)
	}
	m["task"] = true
	return json.Marshal(m)
}

// isTaskCall reports whether a tool.call card was made as an MCP task.
func isTaskCall(c *card.Card) bool {
	var md struct {
		Task bool `json:"task"`
	}
	return c != nil && json.Unmarshal(c.Metadata.Extra[MetadataKey], &md) == nil && md.Task
}

// taskOf reads the task (turn, callID) for ci's agent: the call's cards
// and inbox entries (agent.Client.Resume). Another agent's call is not
// found (the CardStore refuses another agent's turn on the agent's own
// subjects: forbidden).
func (b *Bridge) taskOf(ctx context.Context, ci callInfo, turn, callID string) (*taskState, error) {
	c, err := b.client(ci.id.AgentID)
	if err != nil {
		return nil, err
	}
	ts, err := c.Resume(ctx, turn)
	if errors.Is(err, cardstore.ErrForbidden) {
		return nil, fmt.Errorf("%w: %s (turn %s is not agent %s's)", ErrTaskNotFound, TaskID(turn, callID), turn, ci.id.AgentID)
	}
	if err != nil {
		return nil, fmt.Errorf("read task %s: %w", TaskID(turn, callID), err)
	}
	byID := map[string]*agent.CallState{}
	for i := range ts.Calls {
		byID[ts.Calls[i].ToolCallID] = &ts.Calls[i]
	}
	call := byID[callID]
	if call == nil || call.CallCard == nil || call.CallCard.Metadata.AgentID != ci.id.AgentID {
		return nil, fmt.Errorf("%w: %s (no call %s in turn %s made by agent %s)", ErrTaskNotFound, TaskID(turn, callID), callID, turn, ci.id.AgentID)
	}
	return b.stateOf(turn, *call, byID), nil
}

// stateOf maps a call to an MCP task: no result yet → working; a success
// or partial result → completed; failed or timeout → failed; canceled →
// cancelled. A call whose result waits for an operator (a Handoff's task)
// works until the later call of the turn (byID) that carries the outcome.
func (b *Bridge) stateOf(turn string, call agent.CallState, byID map[string]*agent.CallState) *taskState {
	st := &taskState{call: call}
	t := mcp.NewTask(TaskID(turn, call.ToolCallID), mcp.WithTaskPollInterval(taskPollInterval.Milliseconds()))
	t.CreatedAt = call.CallCard.CreatedAt.UTC().Format(time.RFC3339)
	t.LastUpdatedAt = t.CreatedAt
	final := &call
	if call.Result != nil {
		if h, ht, ok := b.pendingHandoff(call.ToolName, call.Result.Status, call.Result.Result); ok {
			st.handoff, st.handoffTask = h, ht
			final = byID[ht.ResultToolCallID]
			if final != nil && final.Result == nil {
				final = nil
			}
		}
	}
	switch {
	case final == nil || final.Result == nil:
		t.Status = mcp.TaskStatusWorking
		if ht := st.handoffTask; ht != nil {
			t.StatusMessage = fmt.Sprintf("%s waits for an operator: %s", ht.Label, st.handoff.Hint(ht.ID))
		} else {
			t.StatusMessage = fmt.Sprintf("%s runs as tool_call_id %s of turn %s", call.ToolName, call.ToolCallID, turn)
		}
	default:
		st.final = final
		t.LastUpdatedAt = final.ResultCard.CreatedAt.UTC().Format(time.RFC3339)
		switch final.Result.Status {
		case card.StatusSuccess, card.StatusPartial:
			t.Status = mcp.TaskStatusCompleted
		case card.StatusCanceled:
			t.Status = mcp.TaskStatusCancelled
		default:
			t.Status = mcp.TaskStatusFailed
		}
		if e := final.Result.Error; e != nil {
			t.StatusMessage = fmt.Sprintf("%s: %s: %s", final.Result.Status, e.Code, e.Message)
		}
	}
	st.task = t
	return st
}

// flushTimeout bounds the round trip that makes a subscription known to
// the server.
const flushTimeout = 10 * time.Second

// entryGrace is how long waitTask waits for the inbox entry of a result
// it already read.
const entryGrace = 5 * time.Second

// waitTask returns the task's state once it ended (and its result's inbox
// entry is stored), or ctx's error. It listens for the agent's wakeups of
// the call (or of a later call whose id extends its own, as a Handoff's
// outcome call's does) and re-reads the store every taskPollInterval, since a core NATS wakeup can be lost while the inbox
// keeps the result.
func (b *Bridge) waitTask(ctx context.Context, ci callInfo, turn, callID string) (*taskState, error) {
	c, err := b.client(ci.id.AgentID)
	if err != nil {
		return nil, err
	}
	woken := make(chan struct{}, 1)
	sub, err := b.cfg.Conn.Subscribe(c.WakeupSubject(), func(m *nats.Msg) {
		var w utp.Wakeup
		if json.Unmarshal(m.Data, &w) == nil && w.AgentTurnID == turn && strings.HasPrefix(w.ToolCallID, callID) {
			select {
			case woken <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("listen for the wakeups of agent %s: %w", ci.id.AgentID, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	fctx, fcancel := context.WithTimeout(ctx, flushTimeout)
	defer fcancel()
	if err := b.cfg.Conn.FlushWithContext(fctx); err != nil {
		return nil, fmt.Errorf("listen for the wakeups of agent %s: %w", ci.id.AgentID, err)
	}
	tick := time.NewTicker(taskPollInterval)
	defer tick.Stop()
	var ended time.Time
	for {
		st, err := b.taskOf(ctx, ci, turn, callID)
		if err != nil {
			return nil, err
		}
		if st.task.Status.IsTerminal() {
			// The result card is written before the inbox stores its entry
			// (and wakes the agent): wait for the entry, so that the caller
			// can acknowledge it; a result that is never reported (a call
			// canceled before its command was published) ends the wait
			// after entryGrace.
			if st.final.Entry != nil || (!ended.IsZero() && time.Since(ended) >= entryGrace) {
				return st, nil
			}
			if ended.IsZero() {
				ended = time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-woken:
		case <-tick.C:
		}
	}
}

// taskResult is the tasks/result answer of an ended task: the MCP result
// of its final call (as tools/call maps it), related to the task. The
// result's inbox entry is acknowledged: the host has consumed it.
func (b *Bridge) taskResult(ctx context.Context, ci callInfo, st *taskState) *mcp.TaskResultResult {
	f := st.final
	out := &agent.Outcome{Call: agent.Pending{AgentTurnID: f.ResultCard.Metadata.AgentTurnID, ToolCallID: f.ToolCallID, ToolName: f.ToolName},
		ResultCard: f.ResultCard, Result: f.Result}
	r := resultOf(out)
	if st.final.ToolCallID != st.call.ToolCallID {
		// A Handoff's later call is not the task's; say both.
		r.Meta.AdditionalFields[MetaToolCallID] = st.call.ToolCallID
		r.Meta.AdditionalFields["utpmesh/result_tool_call_id"] = f.ToolCallID
	}
	res := &mcp.TaskResultResult{Result: mcp.Result{Meta: mcp.WithRelatedTask(st.task.TaskId)},
		Content: r.Content, StructuredContent: r.StructuredContent, IsError: r.IsError}
	for k, v := range r.Meta.AdditionalFields {
		res.Meta.AdditionalFields[k] = v
	}
	if f.Entry != nil && f.Entry.InboxID != "" {
		if c, err := b.client(ci.id.AgentID); err == nil {
			if _, err := c.Ack(ctx, f.Entry.InboxID); err != nil {
				b.log.Warn("mcp: task result read but its inbox entry not acknowledged", "task", st.task.TaskId, "err", err)
			}
		}
	}
	return res
}

// listTasks lists the tasks of ci's session: the calls of its turn made
// as tasks.
func (b *Bridge) listTasks(ctx context.Context, ci callInfo) ([]mcp.Task, error) {
	c, err := b.client(ci.id.AgentID)
	if err != nil {
		return nil, err
	}
	ts, err := c.Resume(ctx, ci.turn)
	if err != nil {
		return nil, fmt.Errorf("read the session's turn %s: %w", ci.turn, err)
	}
	byID := map[string]*agent.CallState{}
	for i := range ts.Calls {
		byID[ts.Calls[i].ToolCallID] = &ts.Calls[i]
	}
	tasks := []mcp.Task{}
	for _, cs := range ts.Calls {
		if !isTaskCall(cs.CallCard) || cs.CallCard.Metadata.AgentID != ci.id.AgentID {
			continue
		}
		tasks = append(tasks, b.stateOf(ci.turn, cs, byID).task)
	}
	return tasks, nil
}

// cancelTimeout bounds how long tasks/cancel waits for the canceled
// result after cancel_tool_call asked a running worker to stop.
const cancelTimeout = 10 * time.Second

// cancelTask cancels a running task with the PMO built-in
// cancel_tool_call (a UTP call of ci's turn) and returns the task's state
// afterwards.
func (b *Bridge) cancelTask(ctx context.Context, ci callInfo, turn, callID string) (*taskState, error) {
	st, err := b.taskOf(ctx, ci, turn, callID)
	if err != nil {
		return nil, err
	}
	if st.task.Status.IsTerminal() {
		return nil, fmt.Errorf("%w: task %s is %s", ErrTaskTerminal, st.task.TaskId, st.task.Status)
	}
	if ht := st.handoffTask; ht != nil {
		return nil, fmt.Errorf("task %s: its call ended (%s waits for an operator); only an operator ends it: %s",
			st.task.TaskId, ht.Label, st.handoff.Hint(ht.ID))
	}
	args, _ := json.Marshal(map[string]string{"tool_call_id": callID, "agent_turn_id": turn, "reason": "tasks/cancel of MCP task " + st.task.TaskId})
	out, res := b.call(ctx, ci, registry.BuiltinCancelToolCall, args)
	if res != nil {
		return nil, fmt.Errorf("cancel_tool_call: %s", textOf(res))
	}
	if out.Result.Status != card.StatusSuccess {
		return nil, fmt.Errorf("cancel_tool_call: %s", textOf(resultOf(out)))
	}
	wctx, cancel := context.WithTimeout(ctx, cancelTimeout)
	defer cancel()
	if end, err := b.waitTask(wctx, ci, turn, callID); err == nil {
		return end, nil
	}
	// The worker has not stopped yet. The task stays working: the call
	// ends canceled when its worker stops it, but a handler that does not
	// stop may still complete it, and a terminal status must never change.
	st.task.StatusMessage = "cancel requested with cancel_tool_call; the call ends canceled when its worker stops it"
	return st, nil
}

// textOf is the text content of a result.
func textOf(r *mcp.CallToolResult) string {
	var buf bytes.Buffer
	for _, c := range r.Content {
		if t, ok := c.(mcp.TextContent); ok {
			buf.WriteString(t.Text)
		}
	}
	return buf.String()
}
