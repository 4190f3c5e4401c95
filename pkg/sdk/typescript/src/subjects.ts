/**
 * Every NATS subject, stream and consumer name the SDK uses is built here
 * and nowhere else (docs/protocol.md §2, §3). When the mesh moves an
 * operation to another subject (e.g. agent-scoped CardStore or inbox
 * operations for per-agent identities), this module is the one edit.
 */
import { createHash } from "node:crypto";

import { invalid } from "./errors.js";

/** The protocol version token this SDK speaks (§1). */
export const DEFAULT_VERSION = "v1r3";
/** The channel the mesh's own clients use for svc requests (§11.1). */
export const DEFAULT_CHANNEL = "default";

const TOKEN = /^[A-Za-z0-9_-]{1,128}$/;
const MAX_TOOL_TOKEN = 100;

/** checkToken throws unless v is a subject token: 1–128 bytes of [A-Za-z0-9_-] (§2.2). */
export function checkToken(field: string, v: string): void {
  if (typeof v !== "string" || !TOKEN.test(v)) {
    throw invalid(`${field} ${JSON.stringify(v)} is not a subject token: use 1–128 characters of A-Z a-z 0-9 _ - (docs/protocol.md §2.2)`);
  }
}

/** isToken reports whether v is a subject token. */
export function isToken(v: unknown): v is string {
  return typeof v === "string" && TOKEN.test(v);
}

function sha8(s: string): string {
  return createHash("sha256").update(s, "utf8").digest("hex").slice(0, 8);
}

/**
 * toolToken is a tool (or service) name as one subject token: the name
 * itself when it is a token of at most 100 bytes, else the name with every
 * other character replaced by "_", cut to 100 bytes, plus "_" and 8 hex
 * digits of its SHA-256 (Go: subjects.ToolToken).
 */
export function toolToken(name: string): string {
  if (Buffer.byteLength(name) <= MAX_TOOL_TOKEN && TOKEN.test(name)) return name;
  let b = Buffer.from(name, "utf8");
  for (let i = 0; i < b.length; i++) {
    const c = b[i];
    const ok = (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x5f || c === 0x2d;
    if (!ok) b[i] = 0x5f;
  }
  if (b.length > MAX_TOOL_TOKEN) b = b.subarray(0, MAX_TOOL_TOKEN);
  return b.toString("latin1") + "_" + sha8(name);
}

/** inboxPrefix is the reply-inbox prefix of the identity whose public nkey is pub: _INBOX.<pub> (§2.8). */
export function inboxPrefix(pub: string): string {
  return "_INBOX." + pub;
}

/** A project's subjects: version, project and channel tokens. */
export interface Scope {
  version: string;
  project: string;
  channel: string;
}

/** scope checks and returns a Scope (version default v1r3, channel default "default"). */
export function scope(project: string, channel = DEFAULT_CHANNEL, version = DEFAULT_VERSION): Scope {
  checkToken("version", version);
  checkToken("project_id", project);
  checkToken("channel_id", channel);
  return { version, project, channel };
}

const base = (s: Scope) => `cg.${s.version}.${s.project}.${s.channel}`;

/** svc is cg.<v>.<p>.<c>.svc.<service>.<op> (§11.1). */
export function svc(s: Scope, service: string, op: string): string {
  return `${base(s)}.svc.${service}.${op}`;
}

/** dispatchCall is the admission subject of an agent: svc.dispatch.call.<ToolToken(agent)> (§5.7). */
export function dispatchCall(s: Scope, agentId: string): string {
  return svc(s, "dispatch", "call") + "." + toolToken(agentId);
}

/** dispatchKeys is svc.dispatch.keys: the admission public keys and the commands mode (§5.7). */
export function dispatchKeys(s: Scope): string {
  return svc(s, "dispatch", "keys");
}

/** wakeup is cmd.agent.<agent_id>.wakeup (§8.2); agentId must be a token. */
export function wakeup(s: Scope, agentId: string): string {
  checkToken("agent_id", agentId);
  return `${base(s)}.cmd.agent.${agentId}.wakeup`;
}

/**
 * agentCardstore is the agent-scoped subject of an agent's CardStore
 * operation op (get, list_turn, find_result, …):
 * svc.cardstore.<op>.<ToolToken(agent)> (§11.3). The only form a per-agent
 * identity may use; the service serves only that agent's cards on it
 * (Go: subjects.AgentService).
 */
export function agentCardstore(s: Scope, op: string, agentId: string): string {
  return svc(s, "cardstore", op) + "." + toolToken(agentId);
}

/**
 * agentInbox is the agent-scoped subject of an agent's inbox operation op
 * (list, get, ack, set_epoch): svc.inbox.<op>.<ToolToken(agent)> (§11.5).
 */
export function agentInbox(s: Scope, op: string, agentId: string): string {
  return svc(s, "inbox", op) + "." + toolToken(agentId);
}

/** The channel token of state events: a resource belongs to its project, not to a channel (§10.4). */
export const STATE_CHANNEL = "state";

function tokenOrWildcard(field: string, v: string): void {
  if (v !== "*") checkToken(field, v);
}

/**
 * stateEvent is the subject of a state transition of resource of service
 * in a project: cg.<v>.<project>.state.evt.tool.<ToolToken(service)>.state.<resource>
 * (§10.4; Go: subjects.StateEvent). resource must be a subject token.
 */
export function stateEvent(project: string, service: string, resource: string, version = DEFAULT_VERSION): string {
  return stateEventPattern(project, service, resource, version, false);
}

/**
 * stateEventPattern is cg.<v>.<project>.state.evt.tool.<service>.state.<resource>
 * where each of project, service and resource is a subject token or "*"
 * (service is ToolToken'd unless "*"); a runtime subscribes to it before
 * its pre-session mandate_query (§10.4; Go: subjects.StateEventPattern).
 */
export function stateEventPattern(project: string, service: string, resource: string, version = DEFAULT_VERSION, wild = true): string {
  checkToken("version", version);
  const check = wild ? tokenOrWildcard : checkToken;
  check("project_id", project);
  check("resource_id", resource);
  if (!service) throw invalid(`service "" is not a service name: use the tool service's name (atp) or "*"`);
  const svcToken = wild && service === "*" ? "*" : toolToken(service);
  return `cg.${version}.${project}.${STATE_CHANNEL}.evt.tool.${svcToken}.state.${resource}`;
}

/** registryGet and registryList: svc.registry.get / list (§11.4). */
export function registry(s: Scope, op: "get" | "list"): string {
  return svc(s, "registry", op);
}

/** registryPut is a worker's registration of its tool: svc.registry.put.<ToolToken(tool)> (§11.4). */
export function registryPut(s: Scope, tool: string): string {
  return svc(s, "registry", "put") + "." + toolToken(tool);
}

/** A worker's tool-scoped CardStore operations (§11.3). */
export type ToolCardOp = "start_call" | "claim" | "release" | "put_result";

/** workerCardstore is svc.cardstore.<op>.<ToolToken(tool)>, a worker's write for its tool (§11.3). */
export function workerCardstore(s: Scope, op: ToolCardOp, tool: string): string {
  return svc(s, "cardstore", op) + "." + toolToken(tool);
}

/** workerCardRead is a worker's plain CardStore read, svc.cardstore.<op> (§11.3). */
export function workerCardRead(s: Scope, op: "get" | "list_turn" | "find_result"): string {
  return svc(s, "cardstore", op);
}

/** inboxReport is the request way of a report, svc.inbox.report (§8.1). */
export function inboxReport(s: Scope): string {
  return svc(s, "inbox", "report");
}

/** inboxReportStream is the stream way of a report, cmd.sys.inbox.report (§8.1). */
export function inboxReportStream(s: Scope): string {
  return `${base(s)}.cmd.sys.inbox.report`;
}

/** deadLetter is evt.sys.deadletter.command (§7.2). */
export function deadLetter(s: Scope): string {
  return `${base(s)}.evt.sys.deadletter.command`;
}

/** cancelPattern is cg.<v>.*.*.evt.sys.toolcall.cancel, every project's cancel announcements (§7.6). */
export function cancelPattern(version = DEFAULT_VERSION): string {
  return `cg.${version}.*.*.evt.sys.toolcall.cancel`;
}

/** commandFilter is the filter of a tool's durable: cg.<v>.*.*.cmd.tool.<target> (§2.5). */
export function commandFilter(target: string, version = DEFAULT_VERSION): string {
  return `cg.${version}.*.*.cmd.tool.${target}`;
}

/** targetTemplate is the registry target_subject of a tool whose target is target (§2.6). */
export function targetTemplate(target: string): string {
  return `cg.{ver}.{project_id}.{channel_id}.cmd.tool.${target}`;
}

/** describePattern is a served tool's discovery endpoint subject: cg.<v>.*.*.svc.worker.<endpoint> (§2.7). */
export function describePattern(endpoint: string, version = DEFAULT_VERSION): string {
  return `cg.${version}.*.*.svc.worker.${endpoint}`;
}

/** The NATS micro discovery subjects a worker answers (§2.7): $SRV.<verb>[.<name>[.<id>]]. */
export function microSubjects(verb: "PING" | "INFO" | "STATS", name: string, id: string): string[] {
  return [`$SRV.${verb}`, `$SRV.${verb}.${name}`, `$SRV.${verb}.${name}.${id}`];
}

/** streamInfo is the JetStream API subject that reads a stream's info. */
export function streamInfo(stream: string): string {
  return `$JS.API.STREAM.INFO.${stream}`;
}

/** commandStream is cg_cmd_<v> (§3.1). */
export function commandStream(version = DEFAULT_VERSION): string {
  return `cg_cmd_${version}`;
}

/** The streams a worker checks before it starts (§3.1). */
export function streams(version = DEFAULT_VERSION): string[] {
  return [`cg_cmd_${version}`, `cg_wake_${version}`, `cg_evt_${version}`];
}

function safeName(s: string): string {
  if (!/[.*> /\\]/.test(s)) return s;
  return s.replace(/[.*> /\\]/g, "_") + "_" + sha8(s);
}

/** toolConsumer is the durable of a tool, utp_tool_<name> with §3.2's rewrite. */
export function toolConsumer(tool: string): string {
  return "utp_tool_" + safeName(tool);
}

/** endpointName is a tool's micro endpoint name: its consumer name without utp_tool_ (§2.7). */
export function endpointName(tool: string): string {
  return safeName(tool);
}

/** A parsed subject of a tool command. */
export interface CommandSubject extends Scope {
  /** The target: every token after cmd.tool. */
  target: string;
}

/** parseCommand parses cg.<v>.<p>.<c>.cmd.tool.<target…>; it throws naming what is wrong. */
export function parseCommand(subject: string): CommandSubject {
  const t = subject.split(".");
  if (t.length < 7 || t[0] !== "cg" || t[4] !== "cmd" || t[5] !== "tool") {
    throw invalid(`subject ${subject} is not a tool command subject cg.<ver>.<project>.<channel>.cmd.tool.<target>`);
  }
  for (const [i, f] of [[1, "version"], [2, "project_id"], [3, "channel_id"]] as const) checkToken(f, t[i]);
  for (const x of t.slice(6)) checkToken("target", x);
  return { version: t[1], project: t[2], channel: t[3], target: t.slice(6).join(".") };
}

/** parseScope reads version, project and channel of any cg.<v>.<p>.<c>.… subject. */
export function parseScope(subject: string): Scope {
  const t = subject.split(".");
  if (t.length < 7 || t[0] !== "cg") throw invalid(`subject ${subject} is not a cg.<ver>.<project>.<channel>.… subject`);
  for (const [i, f] of [[1, "version"], [2, "project_id"], [3, "channel_id"]] as const) checkToken(f, t[i]);
  return { version: t[1], project: t[2], channel: t[3] };
}

/**
 * renderTemplate renders a registry target_subject template (§2.6) for a
 * scope; a concrete project or channel in it must be the scope's.
 */
export function renderTemplate(template: string, s: Scope): string {
  const t = template.split(".");
  if (t.length < 7 || t[0] !== "cg") throw invalid(`target_subject ${template} is not a subject template`);
  const pos: Record<number, [string, string[]]> = {
    1: [s.version, ["{ver}", "{PROTOCOL_VERSION}"]],
    2: [s.project, ["{project_id}"]],
    3: [s.channel, ["{channel_id}"]],
  };
  for (const [i, [v, ph]] of Object.entries(pos)) {
    const k = Number(i);
    if (ph.includes(t[k])) t[k] = v;
    else if (t[k] !== v) throw invalid(`target_subject ${template}: token ${k + 1} is ${t[k]}, not ${v}; refusing to redirect the call`);
  }
  return t.join(".");
}
