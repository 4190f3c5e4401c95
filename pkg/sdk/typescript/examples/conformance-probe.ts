// The conformance kit's probe tool in TypeScript (docs/write-a-tool-service.md,
// "Conformance kit"; the contract is in the doc of Go package pkg/conformance):
//
//   node dist/examples/conformance-probe.js --creds utpmesh-data/creds/worker-conformance.nk [--project demo]
//
// 'utpmesh conformance tool --exec "node dist/examples/conformance-probe.js …"'
// drives it through the protocol's cases. Arguments select what the handler
// does: echo "value"; fail with "code" and "message"; sleep "ms" (stopping
// when the call is canceled or times out); crash (exit the process on the
// call's first execution). "marker" names a file the handler appends a
// line to first, so the kit counts executions.
import { appendFileSync, readFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { connectMesh, fail, serve } from "@utpmesh/sdk";
import type { Tool } from "@utpmesh/sdk";

const { values: flags } = parseArgs({
  options: {
    nats: { type: "string", default: process.env.NATS_URL ?? "nats://127.0.0.1:4222" },
    creds: { type: "string", default: process.env.NATS_CREDS ?? "utpmesh-data/creds/worker-conformance.nk" },
    project: { type: "string", default: "demo" },
    tool: { type: "string", default: "conformance_probe" },
  },
});

/** linesOf counts the lines of a marker file (0 when it does not exist). */
function linesOf(path: string): number {
  try {
    return readFileSync(path, "utf8").split("\n").length - 1;
  } catch {
    return 0;
  }
}

const probe: Tool = {
  name: flags.tool!,
  description: "The conformance kit's probe: echo, fail, sleep or crash as the arguments say (utpmesh conformance tool).",
  parameters: {
    type: "object", additionalProperties: false, required: ["mode"],
    properties: {
      mode: { enum: ["echo", "fail", "sleep", "crash"] }, value: {},
      code: { type: "string" }, message: { type: "string" },
      ms: { type: "integer", minimum: 0 }, marker: { type: "string" },
    },
  },
  options: { timeout_seconds: 5 },
  handler: async (call) => {
    const a = call.arguments as { mode: string; value?: unknown; code?: string; message?: string; ms?: number; marker?: string };
    let before = 0;
    if (a.marker) {
      before = linesOf(a.marker);
      appendFileSync(a.marker, "x\n");
    }
    const value = a.value ?? null;
    switch (a.mode) {
      case "fail":
        throw fail(a.code ?? "internal_error", a.message ?? "");
      case "sleep":
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, a.ms ?? 0);
          call.signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
        });
        break;
      case "crash":
        if (before === 0) process.exit(3);
        break;
    }
    return value;
  },
};

const nc = await connectMesh({ servers: flags.nats, creds: flags.creds, name: "ts-conformance-probe" });
const worker = await serve({ nc, tools: [probe], projects: [flags.project!] });
process.stdout.write(`probe serving ${probe.name} in project ${flags.project}\n`);
const stop = async () => {
  await worker.stop();
  await nc.drain();
  process.exit(0);
};
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
