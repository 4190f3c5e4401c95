// The conformance kit's agent program in TypeScript (docs/write-a-tool-service.md,
// part D; the contract is in the doc of Go package pkg/conformance):
//
//   node dist/examples/conformance-agent.js --creds utpmesh-data/creds/agent-demo.nk --mandate kit.jwt < request.json
//
// 'utpmesh conformance agent --exec "node dist/examples/conformance-agent.js …"'
// runs it once per case. It reads one request from stdin,
// {"agent_turn_id","wait_ms","calls":[{"tool_call_id","tool_name","arguments"}]},
// makes the calls together (each keeps its tool_call_id, so a re-run of
// the same request finds the calls the turn already has), prints one line
// {"tool_call_id","status","result"?,"error"?} per call as its result
// arrives, or status "pending" for the calls without one after wait_ms,
// and exits 0.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { AgentClient, PendingError, connectMesh } from "@utpmesh/sdk";

const { values: flags } = parseArgs({
  options: {
    nats: { type: "string", default: process.env.NATS_URL ?? "nats://127.0.0.1:4222" },
    creds: { type: "string", default: process.env.NATS_CREDS ?? "utpmesh-data/creds/agent-demo.nk" },
    mandate: { type: "string", default: "kit.jwt" },
    project: { type: "string", default: "demo" },
    agent: { type: "string", default: "conformance-kit" },
  },
});

interface Request {
  agent_turn_id: string;
  wait_ms: number;
  calls: { tool_call_id: string; tool_name: string; arguments: Record<string, unknown> }[];
}

const req = JSON.parse(readFileSync(0, "utf8")) as Request;
const nc = await connectMesh({ servers: flags.nats, creds: flags.creds, name: "ts-conformance-agent" });
try {
  const agent = AgentClient.create({
    nc, project: flags.project!, agentId: flags.agent!, mandate: readFileSync(flags.mandate!, "utf8").trim(),
  });
  const signal = AbortSignal.timeout(req.wait_ms);
  await Promise.all(req.calls.map(async (c) => {
    try {
      const out = await agent.call({
        toolName: c.tool_name, agentTurnId: req.agent_turn_id, toolCallId: c.tool_call_id, arguments: c.arguments, signal,
      });
      const r = out.result;
      process.stdout.write(JSON.stringify({ tool_call_id: c.tool_call_id, status: r.status, result: r.result, error: r.error }) + "\n");
    } catch (e) {
      if (!(e instanceof PendingError) && !signal.aborted) throw e; // aborted: no result within wait_ms
      process.stdout.write(JSON.stringify({ tool_call_id: c.tool_call_id, status: "pending" }) + "\n");
    }
  }));
  await agent.close();
} finally {
  await nc.drain();
}
