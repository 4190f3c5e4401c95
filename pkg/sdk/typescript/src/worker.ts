/**
 * The tool side (docs/protocol.md §2.5, §3.2, §5.7, §7, §8.1): serve tools
 * to a running mesh. Per tool it registers the definition (registry
 * put.<tool>), pulls from the tool's durable (the core creates it), and per
 * command: starts the call under a claim, reads the tool.call card,
 * validates the arguments, verifies the admission, runs the handler under
 * the tool's timeout (in-progress acks keep the command, claim renewals the
 * lease), writes the result under the claim, reports to the inbox (unless
 * the write stored the call's inbox entry: `put_result`'s `inbox_entry`),
 * acks. A command whose tool.call card is missing is retried, its claim
 * given back, until its {@link MISSING_CARD_DELIVERIES}th delivery.
 * The Go counterpart is pkg/worker.
 */
import { hostname } from "node:os";

import { jetstream } from "@nats-io/jetstream";
import type { Consumer, ConsumerMessages, JetStreamClient, JsMsg } from "@nats-io/jetstream";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import type { ValidateFunction } from "ajv";

import { Admissions, HEADER_ADMISSION, HEADER_MANDATE, checkCard, sha256Hex } from "./admission.js";
import { parseCommand } from "./command.js";
import { Discovery } from "./discovery.js";
import type { ToolStats } from "./discovery.js";
import { ErrorCodes, UtpmeshError, invalid } from "./errors.js";
import { callKey, newTraceparent, reportMsgId, traceId, uuidv7 } from "./ids.js";
import { rawValueAt } from "./rawjson.js";
import { applyArgs, checkArgs, compileSchema, sortKeys } from "./schema.js";
import * as subj from "./subjects.js";
import type { CommandSubject, Scope } from "./subjects.js";
import { request, toHeaders } from "./svc.js";
import { ResultCodes, ToolError, isPartial } from "./tool.js";
import type { Call, Tool } from "./tool.js";
import { effectiveAfterExecution } from "./types.js";
import type { Admission, Card, CardMetadata, Claim, Command, RegistryEntry, ToolCallContent, ToolResultContent } from "./types.js";

/** A log line's level. */
export type LogLevel = "debug" | "info" | "warn" | "error";
/** A logger: level, message, fields. */
export type Logger = (level: LogLevel, msg: string, fields?: Record<string, unknown>) => void;

/** stderrLogger writes info and above to stderr as "level msg k=v…". */
export const stderrLogger: Logger = (level, msg, fields) => {
  if (level === "debug") return;
  const kv = Object.entries(fields ?? {}).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`);
  process.stderr.write(`${level.toUpperCase()} ${msg}${kv.length ? " " + kv.join(" ") : ""}\n`);
};

/** Options of {@link serve}. */
export interface WorkerOptions {
  /** The connection, as the tool's worker identity (connectMesh with worker-<service>.nk). */
  nc: NatsConnection;
  /** The tools to serve. */
  tools: Tool[];
  /** The projects to register the tools in (each a subject token); at least one. */
  projects: string[];
  /** The instance id in claims and discovery; default <hostname>-<pid>. */
  instanceId?: string;
  /** The version discovery shows (a semantic version); default 0.0.0-dev. */
  serviceVersion?: string;
  /** The protocol version token; default v1r3. */
  version?: string;
  /** The claim lease; default 5000 ms, renewed every third. */
  leaseMs?: number;
  /** The consumers' ack wait; default 5000 ms: in-progress acks every third. */
  ackWaitMs?: number;
  /** The poison limit when the entry sets no options.max_deliveries; default 5 (§7.7). */
  maxDeliveries?: number;
  /** Calls run at once per tool; default 16. */
  concurrency?: number;
  /** How long stop() lets calls in flight finish before it cancels them; default 30000 ms. */
  drainTimeoutMs?: number;
  /** The logger; default stderrLogger. */
  log?: Logger;
}

const TRANSIENT_MS = 2000;
const CANCEL_MEMORY_MS = 10 * 60_000;
const CANCEL_GRACE_MS = 5000;
const ENTRY_TTL_MS = 5000;
const REPORT_TIMEOUT_MS = 5000;

/**
 * MISSING_CARD_DELIVERIES is how many deliveries of a command whose
 * tool.call card is missing the worker makes before it fails the call
 * bad_request (docs/protocol.md §7, step 4): the earlier ones give the
 * claim back and leave the command for redelivery after 2 s. The
 * single-node mesh publishes a command beside its card's commit (its
 * start_call waits for a card whose write is under way), so a command can
 * outlive a card whose write failed or whose process died; the agent's
 * resent dispatch writes the card. Go: worker.MissingCardDeliveries.
 */
export const MISSING_CARD_DELIVERIES = 3;

/** Why a running call's signal aborted. */
export const AbortReasons = { timeout: "timeout", canceled: "canceled", shutdown: "shutdown", claimLost: "claim_lost" } as const;

/** A job ended before a result: its command is retried (nak) or already settled. */
class Settled extends Error {}

interface Served {
  tool: Tool;
  target: string;
  consumer: string;
  filter: string;
  stats: ToolStats;
}

/**
 * Worker serves tools until stop(). Start it with {@link serve}.
 */
export class Worker {
  private readonly nc: NatsConnection;
  private readonly js: JetStreamClient;
  private readonly log: Logger;
  private readonly instance: string;
  private readonly version: string;
  private readonly lease: number;
  private readonly ackWait: number;
  private readonly maxDeliveries: number;
  private readonly concurrency: number;
  private readonly drainTimeout: number;
  private readonly projects: string[];
  private readonly served = new Map<string, Served>();
  private readonly admissions: Admissions;
  private readonly entries = new Map<string, { at: number; entry?: RegistryEntry; validate?: ValidateFunction; err?: UtpmeshError }>();
  private readonly running = new Map<string, AbortController>();
  private readonly canceled = new Map<string, number>();
  private readonly inflight = new Set<Promise<void>>();
  private readonly loops: Promise<void>[] = [];
  private readonly consumers: ConsumerMessages[] = [];
  private discovery?: Discovery;
  private cancelSub?: Subscription;
  private execs = 0;
  private stopping = false;

  private constructor(o: WorkerOptions) {
    if (!o?.nc) throw invalid("WorkerOptions.nc is required: connect with connectMesh({creds: 'utpmesh-data/creds/worker-<service>.nk'})");
    if (!o.tools?.length) throw invalid("WorkerOptions.tools is empty: give at least one tool");
    if (!o.projects?.length) throw invalid("WorkerOptions.projects is empty: name the projects to register the tools in, e.g. ['demo']");
    this.nc = o.nc;
    this.log = o.log ?? stderrLogger;
    this.instance = o.instanceId ?? `${hostname()}-${process.pid}`;
    this.version = o.version ?? subj.DEFAULT_VERSION;
    this.lease = o.leaseMs ?? 5000;
    this.ackWait = o.ackWaitMs ?? 5000;
    this.maxDeliveries = o.maxDeliveries ?? 5;
    this.concurrency = o.concurrency ?? 16;
    this.drainTimeout = o.drainTimeoutMs ?? 30_000;
    for (const p of o.projects) subj.checkToken("project", p);
    this.projects = [...o.projects];
    this.admissions = new Admissions(o.nc);
    for (const t of o.tools) {
      if (!t?.name || !/^[A-Za-z0-9_.-]{1,128}$/.test(t.name)) throw invalid(`tool name ${JSON.stringify(t?.name)}: use 1–128 characters of A-Z a-z 0-9 _ . -`);
      if (["list_tools", "cancel_tool_call", "mandate_query"].includes(t.name.toLowerCase())) throw invalid(`tool name ${t.name} is a built-in's; choose another`);
      if (typeof t.handler !== "function") throw invalid(`tool ${t.name} has no handler`);
      if (this.served.has(t.name)) throw invalid(`tool ${t.name} is given twice`);
      const target = t.target ?? t.name;
      for (const tok of target.split(".")) subj.checkToken(`tool ${t.name}: target`, tok);
      try {
        compileSchema(t.parameters ?? {});
      } catch (err) {
        throw invalid(`tool ${t.name}: ${(err as Error).message}`);
      }
      this.served.set(t.name, {
        tool: t, target, consumer: subj.toolConsumer(t.name), filter: subj.commandFilter(target, this.version),
        stats: { calls: 0, failed: 0, in_flight: 0, redelivered: 0, claim_takeovers: 0 },
      });
    }
    this.js = jetstream(o.nc);
  }

  /** start checks the streams, registers the tools, and starts serving. */
  static async start(o: WorkerOptions): Promise<Worker> {
    const w = new Worker(o);
    try {
      return await w.begin(o);
    } catch (err) {
      // Leave nothing behind: no consumer, no discovery, no cancel subscription.
      w.stopping = true;
      for (const c of w.consumers) c.stop();
      w.cancelSub?.unsubscribe();
      w.discovery?.stop();
      throw err;
    }
  }

  private async begin(o: WorkerOptions): Promise<Worker> {
    const w = this;
    await w.checkStreams();
    await w.register();
    w.cancelSub = w.nc.subscribe(subj.cancelPattern(w.version), { callback: (err, m) => {
      if (!err) w.onCancel(m.subject, m.data);
    } });
    w.discovery = new Discovery(w.nc, {
      instance: w.instance, version: o.serviceVersion ?? "0.0.0-dev", protocolVersion: w.version, projects: w.projects,
      tools: [...w.served.values()].map((s) => ({
        name: s.tool.name, consumer: s.consumer, filterSubject: s.filter, stats: s.stats,
        describe: async (project: string) => {
          try {
            subj.checkToken("project", project);
            return (await w.entry(s, project)).entry!;
          } catch (err) {
            const e = err as UtpmeshError;
            return e.code === "not_found"
              ? { code: "not_found", message: `tool ${s.tool.name} is not registered in project ${project}` }
              : { code: "unavailable", message: `registry lookup of ${s.tool.name} in project ${project}: ${e.message}` };
          }
        },
      })),
    });
    w.discovery.start(() => {
      const n = w.entries.size;
      w.entries.clear();
      return n;
    });
    for (const s of w.served.values()) {
      const c: Consumer = await w.js.consumers.get(subj.commandStream(w.version), s.consumer).catch((err: Error) => {
        throw new UtpmeshError(ErrorCodes.unavailable,
          `tool ${s.tool.name}: durable ${s.consumer} on ${subj.commandStream(w.version)}: ${err.message} (the mesh creates it for the tool's worker identity: utpmesh identity add worker SERVICE --tools ${s.tool.name})`, { cause: err });
      });
      const msgs = await c.consume({ max_messages: w.concurrency, expires: 5000 });
      w.consumers.push(msgs);
      w.loops.push(w.loop(s, msgs));
    }
    await w.nc.flush();
    w.log("info", "worker serving", { instance: w.instance, tools: [...w.served.keys()].join(","), projects: w.projects.join(","), service_id: w.discovery.id });
    return w;
  }

  /** stats returns a tool's counters (those discovery reports). */
  stats(tool: string): ToolStats | undefined {
    const s = this.served.get(tool);
    return s ? { ...s.stats } : undefined;
  }

  /**
   * stop stops taking commands, lets calls in flight finish (up to
   * drainTimeoutMs), then cancels the rest (they end canceled and are
   * reported; a call still busy 5 s later is abandoned and redelivered).
   */
  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    for (const c of this.consumers) c.stop();
    this.cancelSub?.unsubscribe();
    await Promise.allSettled(this.loops);
    const all = () => Promise.allSettled([...this.inflight]);
    if (!(await within(all(), this.drainTimeout))) {
      for (const ac of this.running.values()) ac.abort(AbortReasons.shutdown);
      await within(all(), CANCEL_GRACE_MS);
    }
    this.discovery?.stop();
    await this.nc.flush().catch(() => undefined);
  }

  private async checkStreams(): Promise<void> {
    for (const s of subj.streams(this.version)) {
      const r = await request<{ error?: { description?: string } }>(this.nc, subj.streamInfo(s), {}, {}).catch((err: UtpmeshError) => {
        throw new UtpmeshError(err.code, `stream ${s}: ${err.message} (start utpmesh up first)`, { cause: err });
      });
      if (r.value.error) throw new UtpmeshError(ErrorCodes.unavailable, `stream ${s}: ${r.value.error.description ?? "missing"} (start utpmesh up first)`);
    }
  }

  private async register(): Promise<void> {
    for (const p of this.projects) {
      const sc = subj.scope(p, subj.DEFAULT_CHANNEL, this.version);
      for (const s of this.served.values()) {
        const t = s.tool;
        const entry: RegistryEntry = {
          project_id: p, tool_name: t.name, description: t.description ?? "", parameters: t.parameters,
          target_subject: subj.targetTemplate(s.target), after_execution: t.afterExecution ?? "suspend", options: t.options ?? {},
        };
        try {
          await request(this.nc, subj.registryPut(sc, t.name), { entry });
        } catch (err) {
          const e = err as UtpmeshError;
          throw new UtpmeshError(e.code, `register tool ${t.name} in project ${p}: ${e.message}`, { cause: err, detail: e.detail });
        }
      }
    }
  }

  private async loop(s: Served, msgs: ConsumerMessages): Promise<void> {
    const slots: Promise<void>[] = [];
    try {
      for await (const m of msgs) {
        if (this.stopping) {
          m.nak();
          continue;
        }
        const p = this.handle(s, m).catch((err: Error) => {
          this.log("error", "worker: unexpected failure handling a command; it will be redelivered", { tool: s.tool.name, err: err.message });
          m.nak(TRANSIENT_MS);
        });
        this.inflight.add(p);
        slots.push(p);
        void p.finally(() => {
          this.inflight.delete(p);
          slots.splice(slots.indexOf(p), 1);
        });
        if (slots.length >= this.concurrency) await Promise.race(slots);
      }
    } catch (err) {
      if (!this.stopping) this.log("error", "worker: consumer stopped", { tool: s.tool.name, err: (err as Error).message });
    }
  }

  private onCancel(subject: string, data: Uint8Array): void {
    try {
      const sc = subj.parseScope(subject);
      const b = JSON.parse(new TextDecoder().decode(data)) as { agent_turn_id?: string; tool_call_id?: string };
      if (!b.agent_turn_id || !b.tool_call_id) return;
      const key = `${sc.project}/${callKey(b.agent_turn_id, b.tool_call_id)}`;
      const now = Date.now();
      for (const [k, at] of this.canceled) if (now - at > CANCEL_MEMORY_MS) this.canceled.delete(k);
      this.canceled.set(key, now);
      this.running.get(key)?.abort(AbortReasons.canceled);
    } catch {
      /* not a cancel announcement */
    }
  }

  /** entry reads (and caches for 5 s) the tool's registry entry in project, with its compiled schema. */
  private async entry(s: Served, project: string): Promise<{ entry?: RegistryEntry; validate?: ValidateFunction }> {
    const key = `${project}/${s.tool.name}`;
    const c = this.entries.get(key);
    if (c && Date.now() - c.at < ENTRY_TTL_MS) {
      if (c.err) throw c.err;
      return c;
    }
    const sc = subj.scope(project, subj.DEFAULT_CHANNEL, this.version);
    try {
      const r = await request<{ entry: RegistryEntry }>(this.nc, subj.registry(sc, "get"), { tool_name: s.tool.name });
      const v = { at: Date.now(), entry: r.value.entry, validate: compileSchema(r.value.entry.parameters ?? {}) };
      this.entries.set(key, v);
      return v;
    } catch (err) {
      const e = err as UtpmeshError;
      if (e.code === "not_found") this.entries.set(key, { at: Date.now(), err: e });
      throw err;
    }
  }

  private async handle(s: Served, m: JsMsg): Promise<void> {
    const delivery = m.info.deliveryCount ?? 1;
    if (delivery > 1) s.stats.redelivered++;
    const keep = setInterval(() => m.working(), Math.max(100, Math.floor(this.ackWait / 3)));
    try {
      await this.job(s, m, delivery);
    } catch (err) {
      if (!(err instanceof Settled)) throw err;
    } finally {
      clearInterval(keep);
    }
  }

  private async job(s: Served, m: JsMsg, delivery: number): Promise<void> {
    let cs: CommandSubject;
    try {
      cs = subj.parseCommand(m.subject);
    } catch (err) {
      return this.deadLetter(m, undefined, s, "subject", (err as Error).message);
    }
    const parsed = parseCommand(m.data, m.headers, cs, s.tool.name);
    if (!parsed.ok && !parsed.routable) return this.deadLetter(m, cs, s, parsed.field, parsed.reason);
    const cmd = parsed.cmd;
    const j = new Job(this, s, m, cs, cmd, delivery);
    await j.run(parsed.ok ? undefined : parsed.reason);
  }

  /** deadLetter publishes a dead-letter record (§7.2) and terminates the message. */
  private async deadLetter(m: JsMsg, cs: CommandSubject | undefined, s: Served, field: string, reason: string): Promise<void> {
    const sc: Scope = cs ?? { version: this.version, project: "_", channel: "_" };
    const rec = {
      reason, field, subject: m.subject, body: Buffer.from(m.data).subarray(0, 4096).toString("utf8"),
      source: `worker:${s.tool.name}`, received_at: new Date().toISOString(),
    };
    try {
      await this.js.publish(subj.deadLetter(sc), JSON.stringify(rec));
      m.term(reason.slice(0, 200));
      this.log("warn", "worker: command dead-lettered", { tool: s.tool.name, field, reason });
    } catch (err) {
      this.log("warn", "worker: dead letter not published; retrying the command", { tool: s.tool.name, err: (err as Error).message });
      m.nak(TRANSIENT_MS);
    }
  }

  // Accessors for Job.
  get conn() { return this.nc; }
  get jsc() { return this.js; }
  get logger() { return this.log; }
  get instanceId() { return this.instance; }
  get leaseMs() { return this.lease; }
  get defaultMaxDeliveries() { return this.maxDeliveries; }
  get verifier() { return this.admissions; }
  nextHolder(): string { return `${this.instance}/${++this.execs}`; }
  lookup(s: Served, project: string) { return this.entry(s, project); }
  wasCanceled(key: string): boolean { return this.canceled.has(key); }
  track(key: string, ac: AbortController | undefined): void {
    if (ac) this.running.set(key, ac);
    else this.running.delete(key);
  }
}

/** serve starts a {@link Worker}: it registers the tools and serves them until stop(). */
export function serve(o: WorkerOptions): Promise<Worker> {
  return Worker.start(o);
}

async function within(p: Promise<unknown>, ms: number): Promise<boolean> {
  let t: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((r) => (t = setTimeout(() => r(false), ms)));
  try {
    return await Promise.race([p.then(() => true), timeout]);
  } finally {
    clearTimeout(t);
  }
}

/** One delivery of one command. */
class Job {
  private readonly svc: Scope;
  private readonly trace: string;
  private readonly key: string;
  private holder = "";
  private claim?: Claim;
  private callCard?: Card;

  constructor(
    private readonly w: Worker,
    private readonly s: Served,
    private readonly m: JsMsg,
    private readonly cs: CommandSubject,
    private readonly cmd: Command,
    private readonly delivery: number,
  ) {
    this.svc = { version: cs.version, project: cs.project, channel: subj.DEFAULT_CHANNEL };
    const tp = m.headers?.get("traceparent") ?? "";
    this.trace = traceId(tp) ? tp : newTraceparent();
    this.key = `${cs.project}/${callKey(cmd.agent_turn_id, cmd.tool_call_id)}`;
  }

  private get name() { return this.s.tool.name; }

  private retry(what: string, err: unknown, ms = TRANSIENT_MS): never {
    this.w.logger("warn", `worker: ${what}; retrying the command in ${ms} ms`, { tool: this.name, tool_call_id: this.cmd.tool_call_id, err: (err as Error)?.message ?? String(err) });
    this.m.nak(ms);
    throw new Settled();
  }

  async run(badCommand?: string): Promise<void> {
    const w = this.w;
    this.holder = w.nextHolder();
    // 1. Start the call: its existing result, or its claim and tool.call card (§7, step 2).
    const body: Record<string, unknown> = {
      agent_turn_id: this.cmd.agent_turn_id, tool_call_id: this.cmd.tool_call_id, holder: this.holder, lease_ms: w.leaseMs,
    };
    if (!badCommand) body.tool_call_card_id = this.cmd.tool_call_card_id;
    let text: string;
    let reply: { result?: Card; claim?: Claim; call_card?: Card };
    try {
      const r = await request<typeof reply>(w.conn, subj.workerCardstore(this.svc, "start_call", this.name), body);
      reply = r.value;
      text = r.text;
    } catch (err) {
      const e = err as UtpmeshError;
      if (e.code === "claim_held") {
        const until = Date.parse((e.detail as { expires_at?: string })?.expires_at ?? "") - Date.now();
        this.m.nak(Math.max(500, Number.isFinite(until) ? until : w.leaseMs));
        throw new Settled();
      }
      if (e.code === "forbidden") {
        return this.deadLetterForbidden(e.message);
      }
      this.retry("start the call", err);
    }
    if (reply.result) return this.reportAndAck(reply.result, false);
    if (!reply.claim) this.retry("start the call", new Error("start_call answered neither a result nor a claim"));
    this.claim = reply.claim;
    this.callCard = reply.call_card;
    if (this.claim.taken_over) this.s.stats.claim_takeovers++;
    if (badCommand) return this.finish(failure("failed", ResultCodes.badRequest, badCommand, this.cmd.after_execution));

    // 2. The registry entry (the tool in this project), the poison limit, cancellation.
    let entry: RegistryEntry;
    let validate: ValidateFunction;
    try {
      const e = await w.lookup(this.s, this.cs.project);
      entry = e.entry!;
      validate = e.validate!;
    } catch (err) {
      const e = err as UtpmeshError;
      if (e.code === "not_found") {
        return this.finish(failure("failed", ResultCodes.badRequest,
          `tool ${this.name} is not registered in project ${this.cs.project} (a worker registers its tools in the projects it serves)`, this.cmd.after_execution));
      }
      if (e.code === ErrorCodes.invalid) return this.finish(failure("failed", ResultCodes.internalError, `registry entry of ${this.name}: ${e.message}`, this.cmd.after_execution));
      await this.release();
      this.retry("read the registry", err);
    }
    const limit = entry.options?.max_deliveries || w.defaultMaxDeliveries;
    if (this.claim.taken_over && this.claim.token > limit) {
      return this.finish(failure("failed", ResultCodes.internalError,
        `gave up after ${this.claim.token - 1} executions that did not finish: the tool may crash its worker`, this.cmd.after_execution));
    }
    if (w.wasCanceled(this.key) || (this.claim.taken_over && (await this.hasCancelCard()))) {
      return this.finish(failure("canceled", ResultCodes.canceled, "the call was canceled by cancel_tool_call", this.cmd.after_execution));
    }

    // 3. The tool.call card (§7, step 4).
    const cc = this.callCard;
    if (!cc) {
      const missing = `tool_call_card_id ${this.cmd.tool_call_card_id}: no such card in project ${this.cs.project} (write the tool.call card before publishing the command)`;
      if (this.delivery < MISSING_CARD_DELIVERIES) {
        // The card may come yet (the agent's resent dispatch writes it):
        // give the claim back, so the redelivery neither waits for it nor
        // counts as a take-over, and retry.
        await this.release();
        this.retry("tool.call card missing", new Error(`${missing}; delivery ${this.delivery} of ${MISSING_CARD_DELIVERIES} before the call fails`));
      }
      return this.finish(failure("failed", ResultCodes.badRequest, missing, this.cmd.after_execution));
    }
    const content = (cc.content ?? {}) as ToolCallContent;
    if (cc.type !== "tool.call" || cc.tool_call_id !== this.cmd.tool_call_id || cc.metadata?.agent_turn_id !== this.cmd.agent_turn_id) {
      return this.finish(failure("failed", ResultCodes.badRequest,
        `card ${cc.card_id} is not the tool.call card of tool_call_id ${this.cmd.tool_call_id} in turn ${this.cmd.agent_turn_id}`, this.cmd.after_execution));
    }
    if (content.tool_name !== this.name) {
      return this.finish(failure("failed", ResultCodes.badRequest,
        `tool.call card ${cc.card_id} calls tool ${JSON.stringify(content.tool_name)}, but the command was sent to ${JSON.stringify(this.name)}`, this.cmd.after_execution));
    }

    // 4. The arguments (§7, step 5).
    const raw = content.arguments ?? {};
    if (typeof raw !== "object" || Array.isArray(raw)) {
      return this.finish(failure("failed", ResultCodes.badRequest, "tool.call card: arguments must be a JSON object", this.cmd.after_execution));
    }
    const args = applyArgs(raw, entry.options);
    const why = checkArgs(validate, args);
    if (why) return this.finish(failure("failed", ResultCodes.badRequest, why, this.cmd.after_execution));

    // 5. The admission (§5.7): signature, routing fields, card content, mandate.
    let admission: Admission;
    let mandate = "";
    try {
      admission = await w.verifier.verify(this.cs, this.m.headers?.get(HEADER_ADMISSION), this.m.subject, this.cmd);
      const rawContent = rawValueAt(text!, ["call_card", "content"]);
      if (rawContent === undefined) throw new UtpmeshError(ErrorCodes.notAdmitted, "not admitted by the mesh: the start_call reply has no call card content to check");
      checkCard(admission, rawContent);
      mandate = this.m.headers?.get(HEADER_MANDATE) ?? "";
      if (mandate) {
        const want = cc.metadata?.mandate_sha256;
        if (typeof want !== "string" || sha256Hex(mandate) !== want) {
          throw new UtpmeshError(ErrorCodes.notAdmitted, `not admitted by the mesh: the ${HEADER_MANDATE} header is not the mandate the tool.call card records`);
        }
      }
    } catch (err) {
      const e = err as UtpmeshError;
      if (e.code !== ErrorCodes.notAdmitted) {
        await this.release();
        this.retry("verify the admission", err);
      }
      let raw = false;
      try {
        raw = await w.verifier.rawCommands(this.cs);
      } catch (rerr) {
        await this.release();
        this.retry("read the project's commands mode", rerr);
      }
      const msg = raw
        ? `${e.message}; project ${this.cs.project} accepts raw commands, but this TypeScript worker runs no Cedar gate, so it refuses them: dispatch through svc.dispatch`
        : `${e.message}: dispatch through svc.dispatch, or opt project ${this.cs.project} into raw commands (utpmesh policy config --project ${this.cs.project} --commands raw)`;
      w.logger("warn", "worker: command not admitted", { tool: this.name, tool_call_id: this.cmd.tool_call_id, reason: e.message });
      return this.finish(failure("failed", ResultCodes.authFailed, msg, this.cmd.after_execution));
    }

    // 6. Run the handler (§7, step 7) under the timeout, renewing the claim.
    const timeoutS = entry.options?.timeout_seconds || 30;
    const ac = new AbortController();
    w.track(this.key, ac);
    const timer = setTimeout(() => ac.abort(AbortReasons.timeout), timeoutS * 1000);
    const renew = setInterval(() => void this.renew(ac), Math.max(100, Math.floor(w.leaseMs / 3)));
    const call: Call = {
      scope: { version: this.cs.version, project: this.cs.project, channel: this.cs.channel },
      agentId: this.cmd.agent_id, agentTurnId: this.cmd.agent_turn_id, turnEpoch: this.cmd.turn_epoch,
      toolCallId: this.cmd.tool_call_id, stepId: cc.metadata?.step_id || this.cmd.step_id || "", toolName: this.name,
      arguments: sortKeys(args) as Record<string, unknown>, callCard: cc, admission, principal: admission.principal, mandate,
      signal: ac.signal, delivery: this.delivery,
    };
    this.s.stats.in_flight++;
    let content2: ToolResultContent;
    try {
      const aborted = new Promise<never>((_, rej) => ac.signal.addEventListener("abort", () => rej(new Aborted(String(ac.signal.reason))), { once: true }));
      const value = await Promise.race([Promise.resolve().then(() => this.s.tool.handler(call)), aborted]);
      if (ac.signal.aborted) throw new Aborted(String(ac.signal.reason));
      const status = isPartial(value) ? "partial" : "success";
      const result = isPartial(value) ? value.value : value;
      const c: ToolResultContent = { status, after_execution: this.cmd.after_execution, result: result === undefined ? null : result };
      c.after_execution = effectiveAfterExecution(c);
      content2 = c;
    } catch (err) {
      content2 = this.errorContent(err, ac, timeoutS);
    } finally {
      clearTimeout(timer);
      clearInterval(renew);
      w.track(this.key, undefined);
      this.s.stats.in_flight--;
    }
    if (ac.signal.reason === AbortReasons.claimLost) {
      // Another worker took the call over: it is the new holder's (§7.4).
      this.retry("the claim was taken over while the tool ran; no result written", new Error("claim lost"));
    }
    return this.finish(content2);
  }

  private errorContent(err: unknown, ac: AbortController, timeoutS: number): ToolResultContent {
    const ae = this.cmd.after_execution;
    if (ac.signal.aborted) {
      switch (ac.signal.reason) {
        case AbortReasons.timeout:
          return failure("timeout", ResultCodes.toolTimeout, `tool ${this.name} did not finish within its timeout of ${timeoutS}s`, ae);
        case AbortReasons.canceled:
          return failure("canceled", ResultCodes.canceled, "the call was canceled by cancel_tool_call", ae);
        case AbortReasons.shutdown:
          return failure("canceled", ResultCodes.canceled, "the worker shut down before the call finished", ae);
      }
    }
    if (err instanceof ToolError) return failure("failed", err.code, err.message, ae, err.detail);
    return failure("failed", ResultCodes.internalError, (err as Error)?.message ?? String(err), ae);
  }

  private async renew(ac: AbortController): Promise<void> {
    if (!this.claim || ac.signal.aborted) return;
    try {
      const r = await request<{ claim: Claim }>(this.w.conn, subj.workerCardstore(this.svc, "claim", this.name),
        { key: this.claim.key, holder: this.holder, lease_ms: this.w.leaseMs });
      if (r.value.claim.token !== this.claim.token) ac.abort(AbortReasons.claimLost);
    } catch (err) {
      const e = err as UtpmeshError;
      if (e.code === "claim_held" || e.code === "forbidden") ac.abort(AbortReasons.claimLost);
      // Other failures: the next renewal tries again.
    }
  }

  private async hasCancelCard(): Promise<boolean> {
    let after = 0;
    for (;;) {
      const b: Record<string, unknown> = { agent_turn_id: this.cmd.agent_turn_id, limit: 1000 };
      if (after) b.after = after;
      const r = await request<{ cards: Card[] | null; next?: number }>(this.w.conn, subj.workerCardRead(this.svc, "list_turn"), b)
        .catch((err) => this.retry("read the turn's cancel cards", err));
      if ((r.value.cards ?? []).some((c) => c.type === "tool.cancel" && c.tool_call_id === this.cmd.tool_call_id)) return true;
      if (!r.value.next) return false;
      after = r.value.next;
    }
  }

  private async release(): Promise<void> {
    if (!this.claim) return;
    await request(this.w.conn, subj.workerCardstore(this.svc, "release", this.name), { key: this.claim.key, holder: this.holder }, { timeoutMs: 2000 })
      .catch(() => undefined);
  }

  /**
   * finish writes the result card under the claim, reports it and acks (§7,
   * step 8). When the put_result reply says inbox_entry (a single node
   * stored the call's inbox entry in the result's commit and rings its
   * wakeup), there is nothing to report: it acks at once (§8.1).
   */
  private async finish(content: ToolResultContent): Promise<void> {
    const cc = this.callCard;
    const md: CardMetadata = {
      agent_id: this.cmd.agent_id, agent_turn_id: this.cmd.agent_turn_id, turn_epoch: this.cmd.turn_epoch,
      step_id: cc?.metadata?.step_id || this.cmd.step_id, tool_call_id: this.cmd.tool_call_id,
      trace_id: cc?.metadata?.trace_id || traceId(this.trace), parent_step_id: cc?.metadata?.parent_step_id,
      function_name: this.name, role: "tool",
    };
    for (const k of Object.keys(md) as (keyof CardMetadata)[]) if (md[k] === undefined || md[k] === "" || md[k] === 0) delete md[k];
    const card: Card = {
      card_id: uuidv7(), project_id: this.cs.project, type: "tool.result", author_id: `tool.${this.name}`,
      content, metadata: md, tool_call_id: this.cmd.tool_call_id, created_at: new Date().toISOString(),
    };
    let rc = card;
    let existed = false;
    let entryStored = false;
    try {
      const r = await request<{ inbox_entry?: boolean }>(this.w.conn, subj.workerCardstore(this.svc, "put_result", this.name),
        { cards: [card], claim: { holder: this.holder, token: this.claim!.token } });
      entryStored = r.value?.inbox_entry === true;
    } catch (err) {
      const e = err as UtpmeshError;
      if (e.code === "result_exists") {
        try {
          rc = (await request<{ card: Card }>(this.w.conn, subj.workerCardRead(this.svc, "find_result"),
            { agent_turn_id: this.cmd.agent_turn_id, tool_call_id: this.cmd.tool_call_id })).value.card;
          existed = true;
        } catch (ferr) {
          this.retry("read the existing result", ferr);
        }
      } else if (e.code === "claim_lost") {
        this.retry("the result was refused claim_lost: another worker took the call over", err);
      } else if ((e.code === "bad_request" || e.code === "too_large") && !content.error?.message.startsWith(UNSTORABLE)) {
        // The result itself is unusable: end the call internal_error instead.
        return this.finish(failure("failed", ResultCodes.internalError, `${UNSTORABLE}${e.message}`, this.cmd.after_execution));
      } else {
        await this.release();
        this.retry("write the result card", err);
      }
    }
    if (!existed) {
      this.s.stats.calls++;
      if (content.status !== "success" && content.status !== "partial") this.s.stats.failed++;
    }
    if (entryStored) return this.stored(rc);
    return this.reportAndAck(rc, true);
  }

  /**
   * stored acks the command of a result whose inbox entry the store wrote
   * in the result's commit: the entry is durable and its wakeup on its way
   * (the inbox rings it, and again at its next start if it dies first), so
   * a report would only find a duplicate. A lost ack is a redelivery, which
   * finds the result and re-reports it.
   */
  private stored(rc: Card): void {
    this.m.ack();
    this.w.logger("debug", "worker: result and inbox entry stored; no report needed",
      { tool: this.name, tool_call_id: this.cmd.tool_call_id, tool_result_card_id: rc.card_id });
  }

  private async deadLetterForbidden(reason: string): Promise<void> {
    const rec = {
      reason, field: "tool_call_card_id", subject: this.m.subject, body: Buffer.from(this.m.data).subarray(0, 4096).toString("utf8"),
      source: `worker:${this.name}`, received_at: new Date().toISOString(),
    };
    try {
      await this.w.jsc.publish(subj.deadLetter(this.cs), JSON.stringify(rec));
      this.m.term("forbidden");
    } catch (err) {
      this.retry("publish a dead letter", err);
    }
  }

  /** reportAndAck reports result card rc to the inbox (request, else the stream) and acks the command (§8.1). */
  private async reportAndAck(rc: Card, _fresh: boolean): Promise<void> {
    const r = rc.content as ToolResultContent;
    const rep = {
      tool_call_id: this.cmd.tool_call_id, agent_turn_id: this.cmd.agent_turn_id, turn_epoch: this.cmd.turn_epoch,
      agent_id: this.cmd.agent_id, tool_result_card_id: rc.card_id, status: r.status, after_execution: r.after_execution,
      step_id: rc.metadata?.step_id || undefined, tool_name: this.name,
    };
    const h: Record<string, string> = {
      traceparent: this.trace, "CG-Project-Id": this.cs.project, "CG-Channel-Id": this.cs.channel, "CG-Agent-Id": this.cmd.agent_id,
      "CG-Turn-Id": this.cmd.agent_turn_id, "CG-Turn-Epoch": String(this.cmd.turn_epoch), "CG-Tool-Call-Id": this.cmd.tool_call_id,
    };
    if (this.cmd.step_id) h["CG-Step-Id"] = this.cmd.step_id;
    for (const k of ["tracestate", "CG-Recursion-Depth"]) {
      const v = this.m.headers?.get(k);
      if (v) h[k] = v;
    }
    const cs = this.cs;
    let taken = false;
    try {
      await request(this.w.conn, subj.inboxReport(cs), rep, { timeoutMs: REPORT_TIMEOUT_MS, headers: h });
      taken = true;
    } catch (err) {
      // refused: never acceptable and already dead-lettered; anything else: the stream way.
      taken = (err as UtpmeshError).code === "refused";
    }
    if (!taken) {
      try {
        await this.w.jsc.publish(subj.inboxReportStream(cs), JSON.stringify(rep), { msgID: reportMsgId(rc.card_id), headers: toHeaders(h) });
      } catch (err) {
        this.retry("report the result", err);
      }
    }
    this.m.ack();
  }
}

class Aborted extends Error {}

const UNSTORABLE = "the result could not be stored: ";

function failure(status: ToolResultContent["status"], code: string, message: string, ae: ToolResultContent["after_execution"], detail?: unknown): ToolResultContent {
  const error: { code: string; message: string; detail?: unknown } = { code, message };
  if (detail !== undefined) error.detail = detail;
  return { status, after_execution: ae, result: { error_code: code, error_message: message }, error };
}
