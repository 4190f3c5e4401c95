// A foreign MCP client for pkg/apps/mcpbridge/foreign_test.go: the MCP
// TypeScript SDK lists the bridge's tools and calls echo, then prints
// {"tools": [names], "result": CallToolResult} as JSON on stdout. When the
// bridge refuses the connection (HTTP without a TOKEN: 401), it prints
// {"connect_error": message} instead, the message as the SDK reports it.
//
//   node client.mjs stdio COMMAND [ARGS...]   (the bridge's env is inherited)
//   node client.mjs http URL [TOKEN]
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [mode, ...rest] = process.argv.slice(2);
let transport;
if (mode === "stdio") {
  transport = new StdioClientTransport({ command: rest[0], args: rest.slice(1), env: process.env, stderr: "inherit" });
} else if (mode === "http") {
  const headers = rest[1] ? { Authorization: `Bearer ${rest[1]}` } : {};
  transport = new StreamableHTTPClientTransport(new URL(rest[0]), { requestInit: { headers } });
} else {
  console.error("usage: node client.mjs stdio COMMAND [ARGS...] | http URL [TOKEN]");
  process.exit(2);
}
const client = new Client({ name: "utpmesh-ts-test", version: "1.0.0" });
try {
  await client.connect(transport);
} catch (e) {
  console.log(JSON.stringify({ connect_error: String(e?.message ?? e) }));
  process.exit(0);
}
const { tools } = await client.listTools();
const result = await client.callTool({ name: "echo", arguments: { from: "typescript" } });
console.log(JSON.stringify({ tools: tools.map((t) => t.name), result }));
await client.close();
