// Package mcptest is the MCP host side of the bridge's tests, the way
// net/http/httptest is the client side of a handler's: it serves a
// *mcpbridge.Bridge over stdio or streamable HTTP and connects a real MCP
// client to it. It is used only by tests — the bridge's own
// (pkg/apps/mcpbridge) and the catalogues' that render through it
// (services/atp/atpmcp, services/atlas) — and imports no catalogue.
//
// Two clients, as MCP hosts differ:
//
//   - Connect: the official go-sdk client (tools/list, tools/call,
//     elicitation, list-changed notifications), with CallTool, Text,
//     Structured, ToolNames and the elicitation answers Answer and
//     Confirm.
//   - ServeTasks: mark3labs/mcp-go's client, for task-augmented calls
//     (tasks/get, tasks/result, tasks/cancel), which the go-sdk client
//     lacks; see TaskClient.
//
// Each and EachTransport run a subtest for every transport (and protocol
// version) the bridge serves. Every helper fails the test on an error and
// bounds its request by a minute; nothing is cleaned up by hand: sessions
// and servers close with t.Cleanup.
package mcptest
