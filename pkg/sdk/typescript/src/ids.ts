/** Ids, trace contexts and keys of the protocol (docs/protocol.md §1, §3.1, §6.5, §7.4). */
import { createHash, randomBytes } from "node:crypto";

import { invalid } from "./errors.js";

/** MAX_ID_LEN is the longest agent_turn_id, tool_call_id or step_id, in bytes (§1). */
export const MAX_ID_LEN = 256;

/** uuidv7 returns a new canonical lower-case UUID version 7 (§1). */
export function uuidv7(now = Date.now()): string {
  const b = randomBytes(16);
  let ms = BigInt(now);
  for (let i = 5; i >= 0; i--) {
    b[i] = Number(ms & 0xffn);
    ms >>= 8n;
  }
  b[6] = (b[6] & 0x0f) | 0x70;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = b.toString("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** isUUID reports whether s is a canonical lower-case UUID (§1). */
export function isUUID(s: unknown): s is string {
  return typeof s === "string" && UUID.test(s);
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** newTraceparent returns a fresh W3C traceparent. */
export function newTraceparent(): string {
  return `00-${randomBytes(16).toString("hex")}-${randomBytes(8).toString("hex")}-01`;
}

/** traceId returns the trace id of a W3C traceparent, or "" when tp is not one. */
export function traceId(tp: string | undefined): string {
  const m = tp ? TRACEPARENT.exec(tp) : null;
  if (!m || /^0+$/.test(m[1]) || /^0+$/.test(m[2])) return "";
  return m[1];
}

/** checkId throws unless v is a usable id: present when required, ≤ 256 bytes, no control characters. */
export function checkId(field: string, v: string | undefined, required: boolean): void {
  if (v === undefined || v === "") {
    if (required) throw invalid(`${field} is required`);
    return;
  }
  if (typeof v !== "string") throw invalid(`${field} must be a string`);
  if (Buffer.byteLength(v) > MAX_ID_LEN) throw invalid(`${field} is longer than ${MAX_ID_LEN} bytes`);
  for (let i = 0; i < v.length; i++) {
    const c = v.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) throw invalid(`${field} ${JSON.stringify(v)} contains a control character at index ${i}`);
  }
}

function u64(n: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(n));
  return b;
}

/**
 * commandMsgId is the Nats-Msg-Id of a tool command (§3.1):
 * cmd-<SHA-256 hex of len‖project‖len‖turn‖len‖call>, lengths as 64-bit
 * big-endian byte counts.
 */
export function commandMsgId(project: string, agentTurnId: string, toolCallId: string): string {
  const h = createHash("sha256");
  for (const s of [project, agentTurnId, toolCallId]) {
    const b = Buffer.from(s, "utf8");
    h.update(u64(b.length));
    h.update(b);
  }
  return "cmd-" + h.digest("hex");
}

/**
 * callKey is the claim key of a call (§7.4): toolcall/<turn>/<call> with
 * "%" written "%25" and "/" written "%2F" in the turn.
 */
export function callKey(agentTurnId: string, toolCallId: string): string {
  return `toolcall/${agentTurnId.replace(/%/g, "%25").replace(/\//g, "%2F")}/${toolCallId}`;
}

/** reportMsgId is the Nats-Msg-Id of a report on the stream way: report-<card id> (§8.1). */
export function reportMsgId(resultCardId: string): string {
  return "report-" + resultCardId;
}

/** nowRFC3339 is the current time in RFC 3339 UTC. */
export function nowRFC3339(): string {
  return new Date().toISOString();
}
