/**
 * The worker's discovery (docs/protocol.md §2.7): the NATS micro v1
 * service utpmesh-worker (PING, INFO, STATS on $SRV.*), one endpoint per
 * served tool answering describe requests, so `utpmesh status` and
 * `nats micro ls` list the worker and its tools. nats.js's own micro
 * package (@nats-io/services) is a pre-release on another nats-core, so the
 * three replies are written here; they are plain JSON.
 */
import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import { nuid } from "@nats-io/transport-node";

import * as subj from "./subjects.js";
import { toHeaders } from "./svc.js";
import type { RegistryEntry } from "./types.js";

/** SERVICE_NAME is the micro service every worker runtime registers. */
export const SERVICE_NAME = "utpmesh-worker";
/** STATS_NOTE is the stats metadata text of the service and its endpoints (§2.7). */
export const STATS_NOTE =
  "num_requests/num_errors count describe requests only; tool calls arrive through JetStream and are counted in each endpoint's STATS data: calls, failed, in_flight, redelivered, claim_takeovers";

/** Per-tool counters of STATS data (§2.7). */
export interface ToolStats {
  calls: number;
  failed: number;
  in_flight: number;
  redelivered: number;
  claim_takeovers: number;
}

/** A served tool as discovery shows it. */
export interface DiscoveredTool {
  name: string;
  consumer: string;
  filterSubject: string;
  stats: ToolStats;
  /** describe returns the entry the worker validates calls against in project, or an error code. */
  describe(project: string): Promise<RegistryEntry | { code: string; message: string }>;
}

/** Discovery answers the micro requests of one worker runtime. */
export class Discovery {
  readonly id = nuid.next();
  private subs: Subscription[] = [];
  private readonly started = new Date().toISOString();
  private describes = 0;
  private describeErrors = 0;

  constructor(
    private readonly nc: NatsConnection,
    private readonly cfg: { instance: string; version: string; protocolVersion: string; projects: string[]; tools: DiscoveredTool[] },
  ) {}

  private base(type: string) {
    return {
      type, name: SERVICE_NAME, id: this.id, version: this.cfg.version,
      metadata: { instance: this.cfg.instance, protocol_version: this.cfg.protocolVersion, projects: this.cfg.projects.join(","), stats: STATS_NOTE },
    };
  }

  private endpoints() {
    return this.cfg.tools.map((t) => {
      const ep = subj.endpointName(t.name);
      return {
        name: ep, subject: subj.describePattern(ep, this.cfg.protocolVersion), queue_group: "q",
        metadata: { tool: t.name, consumer: t.consumer, filter_subject: t.filterSubject, stats: STATS_NOTE },
      };
    });
  }

  /** start subscribes the $SRV subjects and the describe endpoints. */
  start(onRefresh: () => number): void {
    const reply = (body: () => unknown) => (_: Error | null, m: Msg) => {
      if (m.reply) m.respond(JSON.stringify(body()));
    };
    for (const s of subj.microSubjects("PING", SERVICE_NAME, this.id)) {
      this.subs.push(this.nc.subscribe(s, { callback: reply(() => this.base("io.nats.micro.v1.ping_response")) }));
    }
    for (const s of subj.microSubjects("INFO", SERVICE_NAME, this.id)) {
      this.subs.push(this.nc.subscribe(s, {
        callback: reply(() => ({
          ...this.base("io.nats.micro.v1.info_response"),
          description: "utpmesh tool worker: one endpoint per served tool; STATS data holds its call counters",
          endpoints: this.endpoints().map(({ name, subject, queue_group, metadata }) => ({ name, subject, queue_group, metadata })),
        })),
      }));
    }
    for (const s of subj.microSubjects("STATS", SERVICE_NAME, this.id)) {
      this.subs.push(this.nc.subscribe(s, {
        callback: reply(() => ({
          ...this.base("io.nats.micro.v1.stats_response"),
          started: this.started,
          endpoints: this.endpoints().map((e, i) => ({
            name: e.name, subject: e.subject, queue_group: e.queue_group, num_requests: this.describes, num_errors: this.describeErrors,
            last_error: "", processing_time: 0, average_processing_time: 0, data: { ...this.cfg.tools[i].stats },
          })),
        })),
      }));
    }
    for (const t of this.cfg.tools) {
      const s = subj.describePattern(subj.endpointName(t.name), this.cfg.protocolVersion);
      this.subs.push(this.nc.subscribe(s, { queue: "q", callback: (_, m) => void this.describe(t, m) }));
    }
    const refresh = subj.describePattern(`refresh_config_${this.id}`, this.cfg.protocolVersion);
    this.subs.push(this.nc.subscribe(refresh, {
      callback: (_, m) => {
        const n = onRefresh();
        if (m.reply) m.respond(JSON.stringify({ instance: this.cfg.instance, dropped_entries: n }));
      },
    }));
  }

  private async describe(t: DiscoveredTool, m: Msg): Promise<void> {
    this.describes++;
    let project: string;
    try {
      project = subj.parseScope(m.subject).project;
    } catch (err) {
      return this.fail(m, "bad_request", `subject: ${(err as Error).message}`);
    }
    const r = await t.describe(project);
    if ("code" in r && "message" in r && !("tool_name" in r)) return this.fail(m, r.code, r.message);
    if (m.reply) m.respond(JSON.stringify({ instance: this.cfg.instance, entry: r }));
  }

  private fail(m: Msg, code: string, message: string): void {
    this.describeErrors++;
    if (!m.reply) return;
    m.respond(JSON.stringify({ error: { code, message } }), {
      headers: toHeaders({ "Svc-Error-Code": code, "Nats-Service-Error": message, "Nats-Service-Error-Code": code }),
    });
  }

  /** stop unsubscribes: the worker vanishes from discovery. */
  stop(): void {
    for (const s of this.subs) s.unsubscribe();
    this.subs = [];
  }
}
