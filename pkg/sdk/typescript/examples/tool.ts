// A tool service in TypeScript: serves the tool "reverse" to a running mesh.
//
//   node dist/examples/tool.js --creds utpmesh-data/creds/worker-reverse.nk [--project demo]
//
// It connects as the tool's worker identity ('utpmesh identity add worker
// reverse --tools reverse' makes it), registers the tool in the project,
// serves it (only commands the mesh admitted run) and shows in 'utpmesh
// status'. Ctrl-C or SIGTERM: it stops taking commands, lets the calls in
// flight finish and exits 0.
import { parseArgs } from "node:util";

import { connectMesh, fail, serve } from "@utpmesh/sdk";
import type { Tool } from "@utpmesh/sdk";

const { values: flags } = parseArgs({
  options: {
    nats: { type: "string", default: process.env.NATS_URL ?? "nats://127.0.0.1:4222" },
    creds: { type: "string", default: process.env.NATS_CREDS ?? "utpmesh-data/creds/worker-reverse.nk" },
    project: { type: "string", default: "demo" },
  },
});

const reverse: Tool = {
  name: "reverse",
  description: "Reverses a string.",
  parameters: { type: "object", properties: { text: { type: "string", maxLength: 10000 } }, required: ["text"] },
  afterExecution: "suspend",
  handler: (call) => {
    const text = call.arguments.text as string;
    if (text.includes("\u0000")) throw fail("bad_request", "text holds a NUL character");
    return [...text].reverse().join("");
  },
};

const nc = await connectMesh({ servers: flags.nats, creds: flags.creds, name: "ts-tool-example" });
const worker = await serve({ nc, tools: [reverse], projects: [flags.project!] });
const stop = async () => {
  await worker.stop();
  await nc.drain();
  process.exit(0);
};
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
