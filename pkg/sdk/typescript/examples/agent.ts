// An agent runtime in TypeScript: one tool call through a running mesh.
//
//   node dist/examples/agent.js --creds utpmesh-data/creds/agent-demo.nk \
//     --mandate utpmesh-data/demo-mandate.jwt [--tool echo] [--args '{"text":"hello"}']
//
// It connects as the project's agent identity, dispatches the call with
// the mandate (the mesh authorizes it and publishes the command), waits
// for the wakeup, reads the result card, acknowledges it and prints the
// status line and the result.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { AgentClient, connectMesh } from "@utpmesh/sdk";

const { values: flags } = parseArgs({
  options: {
    nats: { type: "string", default: process.env.NATS_URL ?? "nats://127.0.0.1:4222" },
    creds: { type: "string", default: process.env.NATS_CREDS ?? "utpmesh-data/creds/agent-demo.nk" },
    mandate: { type: "string", default: "utpmesh-data/demo-mandate.jwt" },
    project: { type: "string", default: "demo" },
    agent: { type: "string", default: "demo-agent" },
    tool: { type: "string", default: "echo" },
    args: { type: "string", default: '{"text":"hello from TypeScript"}' },
  },
});

const nc = await connectMesh({ servers: flags.nats, creds: flags.creds, name: "ts-agent-example" });
try {
  const agent = AgentClient.create({
    nc, project: flags.project!, agentId: flags.agent!, mandate: readFileSync(flags.mandate!, "utf8"),
  });
  const out = await agent.call({
    toolName: flags.tool!, agentTurnId: `ts-${Date.now()}`, arguments: JSON.parse(flags.args!),
    signal: AbortSignal.timeout(60_000),
  });
  const r = out.result;
  console.log(`${r.status} · ${out.afterExecution} · ${flags.tool} · tool_call_id ${out.call.toolCallId} · turn ${out.call.agentTurnId}`);
  console.log(r.status === "success" ? JSON.stringify(r.result) : `${r.error?.code}: ${r.error?.message}`);
  await agent.close();
  process.exitCode = r.status === "success" ? 0 : 1;
} finally {
  await nc.drain();
}
