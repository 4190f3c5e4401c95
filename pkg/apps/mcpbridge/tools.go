package mcpbridge

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/registry"
)

// emptySchema is the inputSchema of a tool registered without parameters.
var emptySchema = json.RawMessage(`{"type":"object"}`)

// toolOf is the MCP tool of a registry entry: its name, description and
// JSON Schema as inputSchema.
func toolOf(e *registry.Entry) mcp.Tool {
	schema := e.Parameters
	if len(strings.TrimSpace(string(schema))) == 0 || string(schema) == "null" {
		schema = emptySchema
	}
	t := mcp.NewToolWithRawSchema(e.ToolName, e.Description, schema)
	return t
}

// fingerprint says whether a served tool changed.
func (b *Bridge) fingerprint(e *registry.Entry) string {
	return fmt.Sprintf("%s\x00%s\x00%v", e.Description, e.Parameters, b.isAsync(e))
}

// syncTools makes the server's tools the project's registry entries. The
// server announces a change (notifications/tools/list_changed) when the
// set changes. A registry that does not answer keeps the last set and is
// logged.
func (b *Bridge) syncTools(ctx context.Context) {
	entries, err := b.reg.List(ctx, b.cfg.Project)
	if err != nil {
		b.log.Warn("mcp: list the registry", "project", b.cfg.Project, "err", err)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	same := len(entries) == len(b.tools)
	for _, e := range entries {
		if fp, ok := b.tools[e.ToolName]; !ok || fp != b.fingerprint(e) {
			same = false
		}
	}
	if same {
		return
	}
	tools := make([]server.ServerTool, 0, len(entries))
	b.tools = make(map[string]string, len(entries))
	b.async = map[string]bool{}
	for _, e := range entries {
		// Recorded even when skipped below, so an unchanged registry is
		// not synced (and announced) again at every refresh.
		b.tools[e.ToolName] = b.fingerprint(e)
		t := toolOf(e)
		if err := mcp.ValidateParamHeaderAnnotations(&t); err != nil {
			// mcp-go refuses (panics on) such a tool: leave it out rather
			// than take the bridge down for every other tool.
			b.log.Error("mcp: registry entry not offered: its parameters have x-mcp-header annotations MCP refuses; fix the entry",
				"project", b.cfg.Project, "tool", e.ToolName, "err", err)
			continue
		}
		tools = append(tools, server.ServerTool{Tool: t, Handler: b.handleCall})
		b.async[e.ToolName] = b.isAsync(e)
	}
	defer func() {
		// Any other definition mcp-go panics on: keep serving the tools
		// it had, and say why.
		if p := recover(); p != nil {
			b.log.Error("mcp: the registry's tools were refused; the previous list stays", "project", b.cfg.Project, "err", p)
			b.tools = nil
		}
	}()
	b.srv.SetTools(tools...)
}

// DefaultRefreshInterval is how often Watch re-reads the registry.
const DefaultRefreshInterval = 5 * time.Second

// Watch re-reads the registry every interval (DefaultRefreshInterval when
// not positive) until ctx ends, so a registry change is announced with
// notifications/tools/list_changed even while no host lists or calls.
func (b *Bridge) Watch(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultRefreshInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout)
			b.syncTools(rctx)
			cancel()
		}
	}
}

// filterTools keeps the tools the caller's mandate permits: the Windley
// residual of mandate_query (permitted or conditional). A mesh without the
// gate permits everything; any other failure lists nothing (fail closed)
// and is logged, since a hook cannot fail the request.
func (b *Bridge) filterTools(ctx context.Context, res *mcp.ListToolsResult) {
	b.markAsync(ctx, res)
	r, err := b.residual(ctx)
	if err != nil {
		b.log.Error("mcp: tools/list lists no tools: the mandate query failed", "project", b.cfg.Project, "err", err)
		res.Tools = []mcp.Tool{}
		return
	}
	if r == nil {
		return
	}
	permitted := map[string]bool{}
	for _, p := range r.Permitted {
		permitted[p.ToolName] = true
	}
	kept := res.Tools[:0]
	for _, t := range res.Tools {
		if permitted[t.Name] {
			kept = append(kept, t)
		}
	}
	res.Tools = kept
}

// markAsync offers the async tools as tasks (execution.taskSupport
// "optional") to clients of the pre-2026-07-28 era, whose task requests
// the bridge serves (intercept.go).
func (b *Bridge) markAsync(ctx context.Context, res *mcp.ListToolsResult) {
	if server.IsModernRequest(ctx) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range res.Tools {
		if b.async[res.Tools[i].Name] {
			res.Tools[i].Execution = &mcp.ToolExecution{TaskSupport: mcp.TaskSupportOptional}
		}
	}
}

// errNoGate is how mandate_query answers on a mesh without the gate.
const errNoGate = "authorization is not enabled"

// residual runs mandate_query for ctx's caller, as a UTP call of its
// session's turn. It returns nil, nil on a mesh without the gate.
func (b *Bridge) residual(ctx context.Context) (*authz.Residual, error) {
	ci, err := b.info(ctx, "")
	if err != nil {
		return nil, err
	}
	c, err := b.client(ci.id.AgentID)
	if err != nil {
		return nil, err
	}
	qctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout)
	defer cancel()
	r, err := queryMandate(qctx, c, ci.turn, ci.id.Mandate, nil)
	if err != nil && strings.Contains(err.Error(), errNoGate) {
		return nil, nil
	}
	if err != nil || r.ResourceID == nil {
		return r, err
	}
	// A mandate bound to a resource: follow its state events, and query
	// with its state once one is known (follow.go).
	b.follow(ctx, c, *r.ResourceID)
	if st, ok := b.resourceState(*r.ResourceID); ok {
		return queryMandate(qctx, c, ci.turn, ci.id.Mandate, &st)
	}
	return r, nil
}

// queryMandate runs the PMO built-in mandate_query (protocol §10.3) for
// mandate in the bound resource's state (nil: unknown).
func queryMandate(ctx context.Context, c *agent.Client, turnID, mandate string, state *string) (*authz.Residual, error) {
	args := json.RawMessage(`{}`)
	if state != nil {
		args, _ = json.Marshal(map[string]string{"booking_state": *state})
	}
	var r authz.Residual
	if _, err := c.CallInto(ctx, agent.CallRequest{ToolName: registry.BuiltinMandateQuery, Arguments: args, AgentTurnID: turnID, Mandate: mandate}, &r); err != nil {
		return nil, fmt.Errorf("mcp: %w", err)
	}
	return &r, nil
}
