/**
 * Reading a tool command (docs/protocol.md §6, §7.1, §7.2): the routing
 * fields (payload or CG-* header, which must agree), then the rest. A
 * command whose routing fields are unusable is a dead letter; one that is
 * routable but otherwise malformed gets a failed/bad_request result.
 */
import type { MsgHdrs } from "@nats-io/transport-node";

import { MAX_ID_LEN, isUUID } from "./ids.js";
import { isToken } from "./subjects.js";
import type { CommandSubject } from "./subjects.js";
import { isAfterExecution } from "./types.js";
import type { Command } from "./types.js";

/** The outcome of parseCommand. */
export type Parsed =
  | { ok: true; cmd: Command }
  | { ok: false; routable: true; cmd: Command; reason: string }
  | { ok: false; routable: false; field: string; reason: string };

const hdr = (h: MsgHdrs | undefined, k: string) => (h?.get(k) ?? "").trim();

/** parseCommand reads a command body received on s with headers h; tool is the served tool. */
export function parseCommand(data: Uint8Array, h: MsgHdrs | undefined, s: CommandSubject, tool: string): Parsed {
  let body: Record<string, unknown>;
  try {
    const v = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(data)) as unknown;
    if (!v || typeof v !== "object" || Array.isArray(v)) throw new Error("not a JSON object");
    body = v as Record<string, unknown>;
  } catch (err) {
    return { ok: false, routable: false, field: "(body)", reason: `invalid tool command: the body is not a JSON object: ${(err as Error).message}` };
  }
  const dead = (field: string, why: string): Parsed => ({ ok: false, routable: false, field, reason: `invalid tool command: ${field}: ${why}` });
  const str = (field: string, header: string, token: boolean): string | Parsed => {
    const p = body[field];
    const hv = hdr(h, header);
    if (p !== undefined && p !== null && typeof p !== "string") return dead(field, "is not a string");
    const v = (p as string | null | undefined) ?? "";
    if (v !== "" && hv !== "" && v !== hv) return dead(field, `payload value ${JSON.stringify(v)} differs from header ${header} ${JSON.stringify(hv)}`);
    const out = v || hv;
    if (out === "") return dead(field, "is required");
    if (Buffer.byteLength(out) > MAX_ID_LEN) return dead(field, `is longer than ${MAX_ID_LEN} bytes`);
    if (token && !isToken(out)) return dead(field, `${JSON.stringify(out)} is not a subject token`);
    return out;
  };
  const agentId = str("agent_id", "CG-Agent-Id", true);
  if (typeof agentId !== "string") return agentId;
  const turn = str("agent_turn_id", "CG-Turn-Id", false);
  if (typeof turn !== "string") return turn;
  const call = str("tool_call_id", "CG-Tool-Call-Id", false);
  if (typeof call !== "string") return call;
  let epoch: number;
  const pe = body.turn_epoch;
  const he = hdr(h, "CG-Turn-Epoch");
  if (pe !== undefined && pe !== null) {
    if (typeof pe !== "number" || !Number.isSafeInteger(pe) || pe < 0) return dead("turn_epoch", "is not an integer ≥ 0");
    if (he !== "" && String(pe) !== he) return dead("turn_epoch", `payload value ${pe} differs from header CG-Turn-Epoch ${JSON.stringify(he)}`);
    epoch = pe;
  } else if (he !== "") {
    if (!/^\d+$/.test(he)) return dead("turn_epoch", `header CG-Turn-Epoch ${JSON.stringify(he)} is not an integer ≥ 0`);
    epoch = Number(he);
  } else {
    return dead("turn_epoch", "is required");
  }

  const cmd: Command = {
    agent_id: agentId, agent_turn_id: turn, tool_call_id: call, turn_epoch: epoch,
    after_execution: isAfterExecution(body.after_execution) ? body.after_execution : "suspend",
    tool_call_card_id: typeof body.tool_call_card_id === "string" ? body.tool_call_card_id : "",
  };
  const bad = (field: string, why: string): Parsed => ({ ok: false, routable: true, cmd, reason: `invalid tool command: ${field}: ${why}` });
  for (const f of ["args", "arguments", "result"]) {
    if (f in body) {
      return f === "result"
        ? bad(f, "an inline result is not allowed: results are tool.result cards")
        : bad(f, `inline ${f} is not allowed: parameters are read from the tool.call card named by tool_call_card_id`);
    }
  }
  const ps = hdr(h, "CG-Project-Id");
  if (ps !== "" && ps !== s.project) return bad("project_id", `header CG-Project-Id ${JSON.stringify(ps)} differs from the subject's ${s.project}`);
  const cs = hdr(h, "CG-Channel-Id");
  if (cs !== "" && cs !== s.channel) return bad("channel_id", `header CG-Channel-Id ${JSON.stringify(cs)} differs from the subject's ${s.channel}`);
  const ae = body.after_execution;
  if (ae === undefined || ae === null) return bad("after_execution", "is required");
  if (!isAfterExecution(ae)) return bad("after_execution", `${JSON.stringify(ae)} is not suspend or terminate`);
  const cid = body.tool_call_card_id;
  if (cid === undefined || cid === null || cid === "") return bad("tool_call_card_id", "is required");
  if (!isUUID(cid)) return bad("tool_call_card_id", `${JSON.stringify(cid)} is not a canonical lower-case UUID`);
  const step = body.step_id;
  const hs = hdr(h, "CG-Step-Id");
  if (step !== undefined && step !== null && typeof step !== "string") return bad("step_id", "is not a string");
  if (typeof step === "string" && step !== "" && hs !== "" && step !== hs) return bad("step_id", `payload value ${JSON.stringify(step)} differs from header CG-Step-Id ${JSON.stringify(hs)}`);
  const stepId = (typeof step === "string" && step) || hs;
  if (Buffer.byteLength(stepId) > MAX_ID_LEN) return bad("step_id", `is longer than ${MAX_ID_LEN} bytes`);
  if (stepId) cmd.step_id = stepId;
  const tn = body.tool_name;
  if (tn !== undefined && tn !== null && tn !== "") {
    if (typeof tn !== "string") return bad("tool_name", "is not a string");
    if (tn !== tool) return bad("tool_name", `${JSON.stringify(tn)} is not the tool served on this subject (${tool})`);
    cmd.tool_name = tn;
  }
  const at = body.dispatch_requested_at;
  if (at !== undefined && at !== null) {
    if (typeof at !== "string" || !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(at)) {
      return bad("dispatch_requested_at", `${JSON.stringify(at)} is not an RFC 3339 time`);
    }
    cmd.dispatch_requested_at = at;
  }
  if (typeof body.context_box_id === "string" && body.context_box_id !== "") cmd.context_box_id = body.context_box_id;
  return { ok: true, cmd };
}
