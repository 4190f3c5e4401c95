// A worker process for test/mesh.test.ts's take-over test: it serves ts_hold
// with a handler that never ends, prints "executing" when a call starts,
// and is then killed with SIGKILL. Usage: node doomed-worker.js CREDS
import { connectMesh, serve } from "../src/index.js";

const nc = await connectMesh({ creds: process.argv[2] });
await serve({
  nc, projects: ["demo"], instanceId: "ts-doomed-worker", log: () => undefined,
  tools: [{
    name: "ts_hold", parameters: { type: "object", properties: { ms: { type: "integer", minimum: 0 } }, required: ["ms"] },
    options: { timeout_seconds: 60 },
    handler: () => {
      process.stdout.write("executing\n");
      return new Promise(() => undefined);
    },
  }],
});
process.stdout.write("serving\n");
