// The SDK against a real mesh: cmd/utpmesh's TestTypeScriptSDK starts
// `utpmesh up`, serves examples/tool.js, prepares the identities and
// mandates below and runs these tests with:
//
//   NATS_URL            the mesh
//   UTPMESH_TS_DATA     its data directory (creds/, demo-mandate.jwt)
//   UTPMESH_TS_MANDATE  a mandate of agent ts-agent for reverse, ts_slow and ts_hold
//
// Without them the tests skip.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash, createPrivateKey, createPublicKey, sign as edSign } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";

import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";

import { AgentClient, HEADER_ADMISSION, MISSING_CARD_DELIVERIES, PendingError, UtpmeshError, connectMesh, fail, serve, subjects, uuidv7 } from "../src/index.js";
import { request, toHeaders } from "../src/svc.js";
import type { Admission, Card, Report, Tool, ToolResultContent, Wakeup, Worker } from "../src/index.js";

const data = process.env.UTPMESH_TS_DATA;
const skip = data ? false : "needs a mesh: run cmd/utpmesh TestTypeScriptSDK (go test -run TestTypeScriptSDK ./cmd/utpmesh)";
const creds = (name: string) => join(data ?? "", "creds", name + ".nk");
const read = (path: string) => readFileSync(path, "utf8").trim();
// Turn and call ids of this run: the tests can run again on the same mesh.
const run = Date.now().toString(36);
const turn = (name: string) => `ts-${name}-${run}`;
// settled polls cond until it holds or 10 s pass and returns its last value.
// For a worker's own counters: a call's result reaches the agent (through the
// store's wakeup) before the put_result reply reaches the worker that counts it.
const settled = async (cond: () => boolean): Promise<boolean> => {
  for (const end = Date.now() + 10_000; !cond() && Date.now() < end;) await new Promise((r) => setTimeout(r, 10));
  return cond();
};

describe("against a mesh", { skip }, () => {
  let nc: NatsConnection;
  let demo: AgentClient;
  let ts: AgentClient;
  before(async () => {
    nc = await connectMesh({ creds: creds("agent-demo"), name: "ts-sdk-test" });
    demo = AgentClient.create({ nc, project: "demo", agentId: "demo-agent", mandate: read(join(data!, "demo-mandate.jwt")) });
    ts = AgentClient.create({ nc, project: "demo", agentId: "ts-agent", mandate: read(process.env.UTPMESH_TS_MANDATE!) });
  });
  after(async () => {
    await demo?.close();
    await ts?.close();
    await nc?.drain();
  });

  it("calls the Go echo worker and acks the result", async () => {
    const args = { text: "hello", price: 1.5, nested: { k: [1, "x"] } };
    const out = await demo.call({ toolName: "echo", agentTurnId: turn("echo"), arguments: args });
    assert.equal(out.result.status, "success", JSON.stringify(out.result));
    assert.deepEqual(out.result.result, args);
    assert.equal(out.resultCard.metadata?.function_name, "echo");
    assert.equal(out.call.admitted, true);
    const pending = await demo.entries({ agentTurnId: turn("echo") });
    assert.deepEqual(pending, [], "the call's entry is acked");
  });

  it("sends the lazy acks of calls that end while one is in flight together", async () => {
    for (const failBatches of [false, true]) {
      const client = AgentClient.create({ nc, project: "demo", agentId: "demo-agent", mandate: read(join(data!, "demo-mandate.jwt")) });
      const requests: string[][] = [];
      let release!: () => void;
      const held = new Promise<void>((r) => (release = r));
      const ack = client.ack.bind(client);
      // The first request waits for release; with failBatches a request of
      // several ids fails whole, as the inbox's does when one has no entry.
      client.ack = async (ids: string[], lazy = false) => {
        requests.push([...ids]);
        if (requests.length === 1) await held;
        if (failBatches && ids.length > 1) throw new UtpmeshError("not_found", `inbox entries not in project demo: ${ids[ids.length - 1]}`);
        return ack(ids, lazy);
      };
      const t = turn(`acks-${failBatches}`);
      for (let i = 0; i < 6; i++) await client.call({ toolName: "echo", agentTurnId: t, arguments: { i } });
      release();
      await client.flush();
      const want = failBatches ? [1, 5, 1, 1, 1, 1, 1] : [1, 5];
      assert.deepEqual(requests.map((r) => r.length), want, `failBatches=${failBatches}`);
      assert.deepEqual(await client.entries({ agentTurnId: t }), [], "every entry is acked");
      await client.close();
    }
  });

  it("rings its wakeups listener", async () => {
    let got!: (w: Wakeup) => void;
    const wakeup = new Promise<Wakeup>((r) => (got = r));
    const stop = await demo.wakeups((w) => {
      if (w.agent_turn_id === turn("wakeups")) got(w);
    });
    try {
      const p = await demo.dispatch({ toolName: "echo", agentTurnId: turn("wakeups"), arguments: { n: 2 } });
      const w = await wakeup;
      assert.equal(w.tool_call_id, p.toolCallId);
      assert.equal(w.status, "success");
      const { result } = await demo.readResult(w.agent_turn_id, w.tool_call_id, w.tool_result_card_id);
      assert.deepEqual(result.result, { n: 2 });
      assert.equal(await demo.ack([w.inbox_id]), 1);
    } finally {
      stop();
    }
  });

  it("refuses an unknown tool, naming it", async () => {
    await assert.rejects(demo.call({ toolName: "no_such_tool", agentTurnId: turn("unknown") }),
      (e: UtpmeshError) => e.code === "unknown_tool" && /no_such_tool/.test(e.message));
  });

  it("gets auth_failed for a call without a mandate", async () => {
    const bare = AgentClient.create({ nc, project: "demo", agentId: turn("bare") });
    try {
      const out = await bare.call({ toolName: "echo", agentTurnId: turn("bare") });
      assert.equal(out.call.admitted, false);
      assert.equal(out.result.status, "failed");
      assert.equal(out.result.error?.code, "auth_failed");
      assert.equal((out.result.error?.detail as { reason?: string })?.reason, "mandate_missing");
    } finally {
      await bare.close();
    }
  });

  it("resumes a turn after a restart", async () => {
    // The first runtime dispatches and goes away before the result.
    const nc1 = await connectMesh({ creds: creds("agent-demo") });
    const a1 = AgentClient.create({ nc: nc1, project: "demo", agentId: "demo-agent", mandate: read(join(data!, "demo-mandate.jwt")) });
    const p = await a1.dispatch({ toolName: "echo", agentTurnId: turn("resume"), turnEpoch: 1, arguments: { sleep_ms: 200, n: 1 } });
    await a1.close();
    await nc1.close();
    // The restarted runtime finds the call outstanding or unconsumed, and
    // its result once the tool has reported.
    const a2 = AgentClient.create({ nc, project: "demo", agentId: "demo-agent" });
    let st = await a2.resume(turn("resume"));
    assert.equal(st.calls.length, 1);
    assert.equal(st.calls[0].toolCallId, p.toolCallId);
    // Unconsumed: the result card is written; its inbox entry follows
    // once the inbox has taken the report.
    for (let i = 0; !st.unconsumed[0]?.entry && i < 200; i++) {
      await new Promise((r) => setTimeout(r, 100));
      st = await a2.resume(turn("resume"));
    }
    assert.equal(st.unconsumed.length, 1, "the result arrived");
    const c = st.unconsumed[0];
    assert.equal(c.result?.status, "success");
    assert.deepEqual(c.result?.result, { sleep_ms: 200, n: 1 });
    assert.equal(st.turnEpoch, 1);
    const pending = await a2.entries({ agentTurnId: turn("resume") });
    assert.deepEqual(pending.map((e) => e.tool_call_id), [p.toolCallId]);
    assert.equal(await a2.ack([c.entry!.inbox_id]), 1);
    st = await a2.resume(turn("resume"));
    assert.equal(st.finished.length, 1);
    assert.equal(st.finished[0].entry?.state, "acked");
    await a2.close();
  });

  it("calls the TypeScript tool, and a repeated call gets the same result", async () => {
    const out = await ts.call({ toolName: "reverse", agentTurnId: turn("reverse"), arguments: { text: "stressed" } });
    assert.equal(out.result.status, "success", JSON.stringify(out.result));
    assert.equal(out.result.result, "desserts");
    assert.equal(out.resultCard.author_id, "tool.reverse");
    const again = await ts.call({ toolName: "reverse", agentTurnId: turn("reverse"), toolCallId: out.call.toolCallId, arguments: { text: "stressed" } });
    assert.equal(again.resultCard.card_id, out.resultCard.card_id);
    const bad = await ts.call({ toolName: "reverse", agentTurnId: turn("reverse"), arguments: { text: 5 } });
    assert.equal(bad.result.error?.code, "bad_request");
    assert.match(bad.result.error?.message ?? "", /arguments\/text/);
  });

  describe("a worker in this process", () => {
    let wnc: NatsConnection;
    let worker: Worker;
    let started!: () => void;
    let running = new Promise<void>((r) => (started = r));
    const hold = (signal: AbortSignal, ms: number) =>
      new Promise<void>((resolve, reject) => {
        const t = setTimeout(resolve, ms);
        signal.addEventListener("abort", () => {
          clearTimeout(t);
          reject(new Error(String(signal.reason)));
        });
      });
    const params = { type: "object", properties: { ms: { type: "integer", minimum: 0 } }, required: ["ms"] };
    const tools: Tool[] = [
      { name: "ts_slow", parameters: params, options: { timeout_seconds: 1 }, handler: async (c) => {
        await hold(c.signal, c.arguments.ms as number);
        return "late";
      } },
      { name: "ts_hold", parameters: params, options: { timeout_seconds: 60 }, handler: async (c) => {
        started();
        await hold(c.signal, c.arguments.ms as number);
        throw fail("internal_error", "not canceled");
      } },
    ];
    before(async () => {
      wnc = await connectMesh({ creds: creds("worker-tsslow") });
      worker = await serve({ nc: wnc, tools, projects: ["demo"], instanceId: "ts-test-worker", log: () => undefined });
    });
    after(async () => {
      await worker?.stop();
      await wnc?.drain();
    });

    it("ends a call that outlives its timeout with timeout", async () => {
      const out = await ts.call({ toolName: "ts_slow", agentTurnId: turn("timeout"), arguments: { ms: 60_000 } });
      assert.equal(out.result.status, "timeout", JSON.stringify(out.result));
      assert.equal(out.result.error?.code, "tool_timeout");
      // (A mesh the tests ran on before may hold an older call of ts_slow
      // that this worker runs too: at least this call is counted.)
      const counted = () => { const st = worker.stats("ts_slow")!; return st.calls >= 1 && st.failed >= 1 && st.in_flight === 0; };
      assert.ok(await settled(counted), JSON.stringify(worker.stats("ts_slow")));
    });

    it("honours cancel_tool_call", async () => {
      running = new Promise<void>((r) => (started = r));
      const call = ts.call({ toolName: "ts_hold", agentTurnId: turn("cancel"), toolCallId: `hold-${run}`, arguments: { ms: 120_000 } });
      await running;
      const c = await ts.call({ toolName: "cancel_tool_call", agentTurnId: turn("cancel"), arguments: { tool_call_id: `hold-${run}`, reason: "test" } });
      assert.equal(c.result.status, "success", JSON.stringify(c.result));
      assert.equal((c.result.result as { outcome?: string }).outcome, "cancel_requested");
      const out = await call;
      assert.equal(out.result.status, "canceled", JSON.stringify(out.result));
      assert.equal(out.result.error?.code, "canceled");
    });

    it("ends a wait with a PendingError and leaves the call to resume", async () => {
      await assert.rejects(
        ts.call({ toolName: "ts_slow", agentTurnId: turn("pending"), arguments: { ms: 0 }, signal: AbortSignal.abort("gave up") }),
        (e: Error) => e instanceof PendingError && /still pending/.test(e.message));
    });
  });
  it("drains on stop: a call past the drain timeout ends canceled and is reported", async () => {
    const wnc = await connectMesh({ creds: creds("worker-tsslow") });
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    const tool: Tool = {
      name: "ts_hold", parameters: { type: "object", properties: { ms: { type: "integer", minimum: 0 } }, required: ["ms"] },
      options: { timeout_seconds: 60 },
      handler: (c) => new Promise((_, reject) => {
        started();
        c.signal.addEventListener("abort", () => reject(new Error(String(c.signal.reason))));
      }),
    };
    const worker = await serve({ nc: wnc, tools: [tool], projects: ["demo"], instanceId: "ts-drain-worker", drainTimeoutMs: 200, log: () => undefined });
    try {
      const call = ts.call({ toolName: "ts_hold", agentTurnId: turn("drain"), arguments: { ms: 120_000 } });
      await running;
      await worker.stop();
      const out = await call;
      assert.equal(out.result.status, "canceled", JSON.stringify(out.result));
      assert.equal(out.result.error?.message, "the worker shut down before the call finished");
    } finally {
      await worker.stop();
      await wnc.drain();
    }
  });
  it("takes over the call of a killed worker: one result", async () => {
    const child = spawn(process.execPath, [join(dirname(fileURLToPath(import.meta.url)), "..", "testdata", "doomed-worker.js"), creds("worker-tsslow")],
      { stdio: ["ignore", "pipe", "inherit"] });
    const lines = createInterface({ input: child.stdout! });
    const seen = (want: string) => new Promise<void>((resolve, reject) => {
      lines.on("line", (l) => l === want && resolve());
      child.once("exit", (code) => reject(new Error(`the doomed worker exited (${code}) before printing ${want}`)));
    });
    const serving = seen("serving");
    const executing = seen("executing");
    await serving;
    const call = ts.call({ toolName: "ts_hold", agentTurnId: turn("kill"), arguments: { ms: 120_000 } });
    await executing;
    child.kill("SIGKILL");
    // A live worker takes the call over once the dead one's command is
    // redelivered (ack wait) and its claim has lapsed (lease).
    const wnc = await connectMesh({ creds: creds("worker-tsslow") });
    const worker = await serve({
      nc: wnc, projects: ["demo"], instanceId: "ts-heir-worker", log: () => undefined,
      tools: [{ name: "ts_hold", parameters: { type: "object", properties: { ms: { type: "integer", minimum: 0 } }, required: ["ms"] },
        options: { timeout_seconds: 60 }, handler: (c) => ({ delivery: c.delivery }) }],
    });
    try {
      const out = await call;
      assert.equal(out.result.status, "success", JSON.stringify(out.result));
      assert.ok((out.result.result as { delivery: number }).delivery >= 2);
      assert.equal(worker.stats("ts_hold")?.claim_takeovers, 1);
      const st = await ts.resume(turn("kill"));
      assert.equal(st.calls.length, 1);
      assert.equal(st.calls[0].resultCard?.card_id, out.resultCard.card_id);
    } finally {
      await worker.stop();
      await wnc.drain();
    }
  });

  describe("the worker's result and missing-card rules", () => {
    // One worker of ts_hold, its log and its runs recorded; admin watches
    // both ways of a report (svc.inbox.report, cmd.sys.inbox.report).
    let admin: NatsConnection;
    let wnc: NatsConnection;
    let worker: Worker;
    const logs: { level: string; msg: string; fields: Record<string, unknown> }[] = [];
    const runs = new Map<string, number[]>();
    const reports = new Map<string, { subject: string; report: Report }[]>();
    const waiters = new Set<() => void>();
    const changed = () => waiters.forEach((f) => f());
    // until resolves once cond() holds, re-checking on every log line and report.
    const until = <T>(cond: () => T | undefined): Promise<T> => new Promise((resolve) => {
      const check = () => {
        const v = cond();
        if (v === undefined) return;
        waiters.delete(check);
        resolve(v);
      };
      waiters.add(check);
      check();
    });
    const logged = (call: string, pred: (l: (typeof logs)[number]) => boolean) => logs.filter((l) => l.fields.tool_call_id === call && pred(l));
    const sc = subjects.scope("demo");
    const target = `cg.v1r3.demo.${sc.channel}.cmd.tool.ts_hold`;

    before(async () => {
      admin = await connectMesh({ creds: creds("admin"), name: "ts-sdk-test-rules" });
      for (const sub of [subjects.inboxReport(sc), subjects.inboxReportStream(sc)]) {
        admin.subscribe(sub, { callback: (err, m) => {
          if (err) return;
          const report = JSON.parse(new TextDecoder().decode(m.data)) as Report;
          reports.set(report.tool_call_id, [...(reports.get(report.tool_call_id) ?? []), { subject: m.subject, report }]);
          changed();
        } });
      }
      await admin.flush();
      wnc = await connectMesh({ creds: creds("worker-tsslow") });
      worker = await serve({
        nc: wnc, projects: ["demo"], instanceId: "ts-rules-worker",
        log: (level, msg, fields) => {
          logs.push({ level, msg, fields: fields ?? {} });
          changed();
        },
        tools: [{ name: "ts_hold", parameters: { type: "object", properties: { ms: { type: "integer", minimum: 0 } }, required: ["ms"] },
          options: { timeout_seconds: 60 }, handler: (c) => {
            runs.set(c.toolCallId, [...(runs.get(c.toolCallId) ?? []), c.delivery]);
            return { delivery: c.delivery };
          } }],
      });
    });
    after(async () => {
      await worker?.stop();
      await wnc?.drain();
      await admin?.drain();
    });

    // command publishes, as admin, an admitted command of ts_hold whose
    // tool.call card (returned, not written) the caller writes, or not.
    const command = async (name: string) => {
      const agentId = `ts-rules-${run}`;
      const call = `${name}-${run}`;
      const content = { tool_name: "ts_hold", arguments: { ms: 0 }, target_subject: target };
      const card = {
        card_id: uuidv7(), project_id: "demo", type: "tool.call", author_id: agentId, content, tool_call_id: call,
        created_at: new Date().toISOString(), metadata: { agent_id: agentId, agent_turn_id: turn(name), step_id: "s", tool_call_id: call },
      };
      const cmd = {
        agent_id: agentId, agent_turn_id: turn(name), turn_epoch: 0, tool_call_id: call, after_execution: "suspend",
        tool_call_card_id: card.card_id, step_id: "s", tool_name: "ts_hold",
      };
      const adm = signAdmission({
        v: 1, kid: "", sub: target, agent_id: agentId, agent_turn_id: turn(name), turn_epoch: 0, tool_call_id: call,
        tool_call_card_id: card.card_id, tool_name: "ts_hold", after_execution: "suspend", principal: `agent:${agentId}`,
        card_sha256: createHash("sha256").update(JSON.stringify(content)).digest("hex"), iat: Date.now(),
      });
      await jetstream(admin).publish(target, JSON.stringify(cmd), { headers: toHeaders({ [HEADER_ADMISSION]: adm }) });
      return { call, card };
    };
    // acked resolves once ts_hold's durable has no command unacknowledged:
    // a worker acks after its report, so a report sent was seen before.
    const acked = async () => {
      const jsm = await jetstreamManager(admin);
      for (;;) {
        const ci = await jsm.consumers.info(subjects.commandStream(), subjects.toolConsumer("ts_hold"));
        if (ci.num_ack_pending === 0 && ci.num_pending === 0) return;
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    const retried = (call: string) => logged(call, (l) => l.level === "warn" && /tool\.call card missing/.test(l.msg)).map((l) => String(l.fields.err));

    it("acks without a report when put_result stored the inbox entry; the agent is woken", { timeout: 60_000 }, async () => {
      let got!: (w: Wakeup) => void;
      const wakeup = new Promise<Wakeup>((r) => (got = r));
      const stop = await ts.wakeups((w) => {
        if (w.agent_turn_id === turn("noreport")) got(w);
      });
      try {
        const p = await ts.dispatch({ toolName: "ts_hold", agentTurnId: turn("noreport"), arguments: { ms: 0 } });
        const w = await wakeup;
        assert.equal(w.tool_call_id, p.toolCallId);
        assert.equal(w.status, "success");
        await acked();
        assert.deepEqual(reports.get(p.toolCallId) ?? [], [], "no report");
        assert.equal(logged(p.toolCallId, (l) => /no report needed/.test(l.msg)).length, 1);
        assert.deepEqual(runs.get(p.toolCallId), [1]);
        assert.equal(await ts.ack([w.inbox_id]), 1);
      } finally {
        stop();
      }
    });

    it("retries a command whose tool.call card is written after its first delivery: it runs once", { timeout: 60_000 }, async () => {
      const { call, card } = await command("latecard");
      const first = await until(() => retried(call).find((e) => /delivery 1 of 3 before the call fails/.test(e)) ??
        (reports.get(call) ? `reported ${JSON.stringify(reports.get(call))} instead` : undefined));
      assert.match(first, /delivery 1 of 3/, "the first delivery is left for redelivery");
      await request(admin, subjects.svc(sc, "cardstore", "put"), { cards: [card] });
      await until(() => runs.get(call));
      await acked();
      // The result's commit stored the inbox entry: no report.
      assert.deepEqual(reports.get(call) ?? [], [], "no report");
      const ran = runs.get(call) ?? [];
      assert.equal(ran.length, 1, `runs at deliveries ${ran}`);
      assert.ok(ran[0] >= 2, `ran at delivery ${ran[0]}`);
      assert.equal(retried(call).length, ran[0] - 1);
      // The first delivery gave its claim back: no take-over.
      assert.equal(worker.stats("ts_hold")?.claim_takeovers, 0);
      const r = await request<{ card: Card }>(admin, subjects.svc(sc, "cardstore", "find_result"), { agent_turn_id: turn("latecard"), tool_call_id: call });
      assert.equal((r.value.card.content as ToolResultContent).status, "success", JSON.stringify(r.value.card.content));
    });

    it(`fails a command whose tool.call card never comes bad_request on delivery ${MISSING_CARD_DELIVERIES}, and reports it`, { timeout: 60_000 }, async () => {
      const { call, card } = await command("nocard");
      const [rep] = await until(() => reports.get(call));
      assert.equal(rep.subject, subjects.inboxReport(sc), "reported by request");
      assert.equal(rep.report.status, "failed");
      const errs = retried(call);
      assert.equal(errs.length, MISSING_CARD_DELIVERIES - 1, errs.join("\n"));
      errs.forEach((e, i) => assert.match(e, new RegExp(`delivery ${i + 1} of ${MISSING_CARD_DELIVERIES} before`)));
      assert.equal(runs.get(call), undefined, "the handler never ran");
      assert.equal(worker.stats("ts_hold")?.claim_takeovers, 0);
      const r = await request<{ card: Card }>(admin, subjects.svc(sc, "cardstore", "get"), { card_id: rep.report.tool_result_card_id });
      const c = r.value.card.content as ToolResultContent;
      assert.equal(c.status, "failed");
      assert.equal(c.error?.code, "bad_request");
      assert.equal(c.error?.message,
        `tool_call_card_id ${card.card_id}: no such card in project demo (write the tool.call card before publishing the command)`);
    });
  });
});

// signAdmission signs a as the mesh does (CG-Admission: base64url claims,
// ".", base64url Ed25519 signature), with the mesh's admission key from
// its data directory (admission.key: the base64url seed).
function signAdmission(a: Admission): string {
  const seed = Buffer.from(read(join(data!, "admission.key")), "base64url");
  const priv = createPrivateKey({ key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), seed]), format: "der", type: "pkcs8" });
  const pub = Buffer.from(createPublicKey(priv).export({ format: "jwk" }).x!, "base64url");
  a.kid = createHash("sha256").update(pub).digest("base64url").slice(0, 16);
  const payload = Buffer.from(JSON.stringify(a)).toString("base64url");
  return `${payload}.${edSign(null, Buffer.from(payload), priv).toString("base64url")}`;
}

describe("resent requests", { skip }, () => {
  // A real subscriber standing for a service whose process took the first
  // request and died with it: it answers only the copies after it.
  it("a request with resendMs is answered on a copy when the first is dropped", async () => {
    const admin = await connectMesh({ creds: creds("admin"), name: "ts-sdk-test-resend" });
    try {
      const subject = `ts_sdk_test.resend.${run}`;
      let seen = 0;
      let answerFrom = 2; // the copy the subscriber answers first
      const sub = admin.subscribe(subject, {
        callback: (_err, m) => {
          seen++;
          if (seen >= answerFrom) m.respond(JSON.stringify({ copy: seen }));
        },
      });
      await admin.flush();
      const r = await request<{ copy: number }>(admin, subject, { k: "v" }, { timeoutMs: 3_000, resendMs: 200 });
      assert.ok(r.value.copy >= 2, `answered by copy ${r.value.copy}`);
      assert.ok(seen >= 2, `${seen} copies reached the subscriber`);
      // Without resendMs a dropped request waits out its timeout.
      answerFrom = Number.POSITIVE_INFINITY;
      await assert.rejects(request(admin, subject, {}, { timeoutMs: 300 }), (e: UtpmeshError) => e.code === "timeout");
      sub.unsubscribe();
    } finally {
      await admin.drain();
    }
  });
});
