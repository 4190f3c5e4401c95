// Package mcpbridge serves the tools of a utpmesh project as an MCP server
// (Model Context Protocol), so that any MCP host — an IDE, a desktop agent,
// an SDK-based agent — can use the mesh without a UTP client. Every MCP
// tools/call is one real UTP call made with pkg/agent: a tool.call card, a
// command, a worker, a tool.result card, the inbox's wakeup. Nothing is
// executed by the bridge itself, so every call is replayable with
// 'utpmesh turns show'.
//
// The MCP side is github.com/mark3labs/mcp-go (see docs/mcp.md for why): it
// serves protocol versions 2026-07-28 (stateless, multi round-trip input
// requests) and 2025-11-25 (initialize handshake, server-sent elicitation)
// on stdio and streamable HTTP.
//
// # Mapping
//
//   - tools/list: the project's registry entries (natsreg), each with its
//     JSON Schema as inputSchema, filtered to the tools the caller's
//     mandate permits: the Windley residual of the PMO built-in
//     mandate_query (permitted, including conditional tools). A mesh
//     without the Cedar gate lists every entry; a failed query lists
//     nothing and is logged (fail closed).
//   - tools/call: agent.Client.Call with the caller's agent id and mandate;
//     the result becomes structuredContent (a non-object result is wrapped
//     as {"result": …}) plus its JSON text; a result other than success or
//     partial becomes isError with "<status>: <code>: <message>" and the
//     error object in structuredContent. The call card's metadata carries
//     "mcp": {session_id, request_id, protocol_version, client}.
//   - Sessions: each MCP session is one agent turn, "mcp-<session>": a
//     stdio bridge is one session (a new id per process), a 2025-11-25 HTTP
//     session is its Mcp-Session-Id, and a stateless 2026-07-28 HTTP caller
//     is the session of its mandate (mcp-<jti>).
//   - Confirmation: a result that waits for a human's confirmation
//     (package confirm; ATLAS's PENDING_CONFIRM) is asked as an
//     elicitation (a multi round-trip input request for 2026-07-28
//     clients, elicitation/create for 2025-11-25 ones); accept runs the
//     result's confirm tool, decline or cancel its cancel tool
//     (ATLAS_CONFIRM / ATLAS_CANCEL by default), each a UTP call of the
//     same turn. A host without elicitation gets the pending result and
//     the confirmation id, and can call the confirm tool itself.
//   - Operator handoff: a catalogue registers a Handoff for a tool whose
//     result may wait for an operator, its outcome arriving later as
//     another call of the turn (ATP's HEM escalation:
//     services/atp/atpmcp, registered by cmd/utpmesh). Such a pending
//     result is asked the same way when the host's mandate is an
//     operator's (mandate_query permits the task's Operators tools); the
//     answer is carried out by the Handoff (confirm, or decline with the
//     form's reason). Other hosts get the pending result and the task id.
//   - Tasks: a tool whose registry entry has the option "async": true (or
//     that a Handoff owns) is listed with execution.taskSupport "optional" for
//     clients before 2026-07-28. A tools/call with "task" dispatches the
//     UTP call and answers with the task at once; its id (TaskID) encodes
//     (agent_turn_id, tool_call_id). The bridge serves tasks/get,
//     tasks/result, tasks/list and tasks/cancel itself, ahead of mcp-go
//     (whose task store is an in-memory map that cannot be replaced),
//     reading the card store and the inbox, so any bridge of the project
//     answers for any task of the caller's agent, across restarts.
//     tasks/cancel is the PMO built-in cancel_tool_call. The result of a
//     task waiting for an operator is the Handoff's outcome call.
//
// Identity: on stdio the agent and mandate come from the bridge's
// configuration (the CLI's --agent/--mandate); on HTTP every request must
// carry the mandate JWT as "Authorization: Bearer <token>", whose sub is
// the calling agent. The bridge has the mesh's policy service verify that
// token before it acts for the agent (a mesh without the gate serves none
// and checks no mandates); the gate verifies it again on every call.
package mcpbridge
