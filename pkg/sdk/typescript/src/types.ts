/** The wire types of docs/protocol.md, as TypeScript types. Unknown fields are kept as they came. */
import { ErrorCodes, UtpmeshError } from "./errors.js";

/** after_execution of a call (§4.4). */
export type AfterExecution = "suspend" | "terminate";
/** The status of a tool.result (§4.4). */
export type Status = "success" | "failed" | "canceled" | "timeout" | "partial";
/** Inbox entry states (§9.4); "all" in list queries. */
export type EntryState = "pending" | "acked" | "stale";

/** Card metadata (§4.2). Extension keys are kept. */
export interface CardMetadata {
  agent_id?: string;
  agent_turn_id?: string;
  turn_epoch?: number;
  step_id?: string;
  tool_call_id?: string;
  trace_id?: string;
  parent_step_id?: string;
  function_name?: string;
  role?: string;
  [extension: string]: unknown;
}

/** A card (§4.1). */
export interface Card {
  card_id: string;
  project_id: string;
  type: string;
  author_id?: string;
  content: unknown;
  metadata?: CardMetadata;
  tool_call_id?: string;
  created_at: string;
}

/** The error object of a non-success result (§4.4). */
export interface ResultError {
  code: string;
  message: string;
  detail?: unknown;
}

/** tool.call content (§4.3). */
export interface ToolCallContent {
  tool_name: string;
  arguments?: Record<string, unknown> | null;
  target_subject?: string;
}

/** tool.result content (§4.4). */
export interface ToolResultContent {
  status: Status;
  after_execution: AfterExecution;
  result?: unknown;
  error?: ResultError;
}

/** A wakeup (§8.2). */
export interface Wakeup {
  agent_id: string;
  inbox_id: string;
  reason: string;
  agent_turn_id: string;
  turn_epoch: number;
  tool_call_id: string;
  tool_result_card_id: string;
  status: Status;
  after_execution: AfterExecution;
  step_id?: string;
  /**
   * The tool.result card tool_result_card_id names, as stored; present
   * when a single node rang the wakeup from the result's commit and the
   * card is small (§8.2). Check it before use (carriedResult).
   */
  result_card?: Card;
}

/** An inbox entry (§9.4). */
export interface InboxEntry {
  inbox_id: string;
  project_id: string;
  channel_id: string;
  agent_id: string;
  agent_turn_id: string;
  turn_epoch: number;
  tool_call_id: string;
  tool_result_card_id: string;
  status: Status;
  after_execution: AfterExecution;
  step_id?: string;
  tool_name?: string;
  state: EntryState;
  created_at: string;
  acked_at?: string;
  wakeup_sent_at?: string;
  traceparent?: string;
}

/** A claim (§11.3). */
export interface Claim {
  project_id: string;
  key: string;
  holder: string;
  token: number;
  expires_at: string;
  taken_over?: boolean;
  previous_holder?: string;
  expired?: boolean;
}

/** A registry entry (§12.1). */
export interface RegistryEntry {
  project_id?: string;
  tool_name: string;
  description?: string;
  parameters: Record<string, unknown>;
  target_subject: string;
  after_execution: AfterExecution;
  options?: ToolOptions;
  updated_at?: string;
}

/** Registry options (§12.2); other keys are kept. */
export interface ToolOptions {
  timeout_seconds?: number;
  args?: { defaults?: Record<string, unknown>; fixed?: Record<string, unknown> };
  max_deliveries?: number;
  [key: string]: unknown;
}

/** A dispatch request (§5.7). */
export interface DispatchRequest {
  agent_id: string;
  agent_turn_id: string;
  turn_epoch: number;
  step_id: string;
  parent_step_id?: string;
  tool_call_id: string;
  tool_name: string;
  arguments: Record<string, unknown>;
  after_execution?: AfterExecution;
  traceparent: string;
  mandate?: string;
  metadata?: Record<string, unknown>;
  created_at?: string;
}

/** The admission's reply (§5.7). */
export interface DispatchReply {
  admitted: boolean;
  tool_call_id: string;
  tool_call_card_id: string;
  step_id: string;
  target_subject: string;
  after_execution: AfterExecution;
  traceparent: string;
  error?: ResultError;
}

/** A tool command body (§6.1). */
export interface Command {
  agent_id: string;
  agent_turn_id: string;
  turn_epoch: number;
  tool_call_id: string;
  after_execution: AfterExecution;
  tool_call_card_id: string;
  step_id?: string;
  tool_name?: string;
  context_box_id?: string;
  dispatch_requested_at?: string;
}

/** A report body (§8.1). */
export interface Report {
  tool_call_id: string;
  agent_turn_id: string;
  turn_epoch: number;
  agent_id: string;
  tool_result_card_id: string;
  status: Status;
  after_execution: AfterExecution;
  step_id?: string;
  tool_name?: string;
}

/** The claims of a CG-Admission header (§5.7). */
export interface Admission {
  v: number;
  kid: string;
  sub: string;
  agent_id: string;
  agent_turn_id: string;
  turn_epoch: number;
  tool_call_id: string;
  tool_call_card_id: string;
  tool_name: string;
  after_execution: AfterExecution;
  principal: string;
  card_sha256: string;
  mandate_jti?: string;
  iat: number;
}

/** isAfterExecution reports whether v is suspend or terminate. */
export function isAfterExecution(v: unknown): v is AfterExecution {
  return v === "suspend" || v === "terminate";
}

/**
 * effectiveAfterExecution is a result's after_execution: its
 * result.__cg_control.after_execution when valid, else the card's (§7.8).
 */
export function effectiveAfterExecution(r: ToolResultContent): AfterExecution {
  const res = r.result as { __cg_control?: { after_execution?: unknown } } | null | undefined;
  const ov = res && typeof res === "object" && !Array.isArray(res) ? res.__cg_control?.after_execution : undefined;
  return isAfterExecution(ov) ? ov : r.after_execution;
}

/** The type of a {@link StateEvent}. */
export const STATE_EVENT_TYPE = "state_transition";

/**
 * A state event (§10.4; Go: utp.StateEvent): one committed state
 * transition of a tool service's resource (an ATP booking). A doorbell:
 * the service's record (event_id) is the truth.
 */
export interface StateEvent {
  /** "state_transition". */
  type: string;
  /** The tool service ("atp"). */
  service: string;
  project_id: string;
  /** The resource that changed (ATP: the booking_object_id). */
  resource_id: string;
  /** The states the gate sees (authz context.booking_state), before and after. */
  old_state: string;
  new_state: string;
  /** The service's record of the transition (ATP: the event log's entry id); the message's Nats-Msg-Id too. */
  event_id: string;
  /** Who made it: agent:<id>, operator:<name>, or the service's own actor (atp.timeout). */
  actor: string;
  /** When it was committed (RFC 3339). */
  time: string;
  /** The service's own data of the transition. */
  detail?: unknown;
}

/**
 * decodeStateEvent parses and checks a state event's payload; it throws
 * naming what is missing (Go: utp.DecodeStateEvent).
 */
export function decodeStateEvent(text: string): StateEvent {
  let e: StateEvent;
  try {
    e = JSON.parse(text) as StateEvent;
  } catch (err) {
    throw new UtpmeshError(ErrorCodes.badReply, `state event: not JSON: ${(err as Error).message}`);
  }
  if (!e || typeof e !== "object" || e.type !== STATE_EVENT_TYPE || !e.service || !e.resource_id || !e.new_state) {
    throw new UtpmeshError(ErrorCodes.badReply, `state event needs type "${STATE_EVENT_TYPE}", service, resource_id and new_state: ${text.slice(0, 200)}`);
  }
  return e;
}

/** One tool of a residual set (§10.3; Go: authz.PermittedTool). */
export interface PermittedTool {
  tool_name: string;
  /** The Cedar action, e.g. ATPAction::"update_pre_arrangement". */
  action: string;
  /** True: permitted only when conditions hold, or only for hem_ids. */
  conditional: boolean;
  /** Permitted only with these hem_id values. */
  hem_ids?: string[];
  /** Residual Cedar policies that still decide ("<policy id>: <Cedar text>"). */
  conditions?: string[];
}

/** The result of mandate_query, the residual set (§10.3; Go: authz.Residual). */
export interface Residual {
  template_version: string;
  project_id: string;
  agent_id: string;
  mandate_jti?: string;
  expires_at?: string;
  /** The mandate's bound resource (null: none). */
  booking_object_id: string | null;
  /** The state the query was told (null: unknown). */
  booking_state: string | null;
  permitted: PermittedTool[] | null;
  not_permitted: string[] | null;
  hem_ids: string[] | null;
  /** The Windley context block for a system prompt. */
  context_block: string;
}

/**
 * residualAllows reports whether the residual set permits tool (for a tool
 * permitted only for listed hem_ids: with hemId); a conditional tool is
 * not permitted (Go: authz.Residual.Allows).
 */
export function residualAllows(r: Residual | undefined, tool: string, hemId = ""): boolean {
  for (const p of r?.permitted ?? []) {
    if (p.tool_name !== tool) continue;
    if (p.hem_ids && p.hem_ids.length > 0) return p.hem_ids.includes(hemId);
    return !p.conditional;
  }
  return false;
}
