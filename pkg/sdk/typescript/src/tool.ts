/** What a tool is and what its handler gets and returns (docs/protocol.md §4.4, §7, §13). */
import type { Scope } from "./subjects.js";
import type { AfterExecution, Admission, Card, ToolOptions } from "./types.js";

/** A tool: its registry definition and its handler. */
export interface Tool {
  /** The registry tool_name: 1–128 characters of [A-Za-z0-9_.-], not a built-in name. */
  name: string;
  /** What the tool does, for the model. */
  description?: string;
  /** JSON Schema of the arguments: an object schema (draft 2020-12, or draft-07 by $schema). */
  parameters: Record<string, unknown>;
  /** The registered after_execution; default "suspend". */
  afterExecution?: AfterExecution;
  /** The command target (dot-separated tokens); default the name. */
  target?: string;
  /** Registry options (§12.2): timeout_seconds, args, max_deliveries, … */
  options?: ToolOptions;
  /**
   * handler runs one admitted, validated call. Return the result value (or
   * {@link partial}(value)); throw {@link fail}(code, message) for a failed
   * result with a UTP code; any other error ends the call internal_error.
   * Stop work when call.signal aborts (timeout, cancel_tool_call, shutdown).
   */
  handler: (call: Call) => Promise<unknown> | unknown;
}

/** One call as the handler sees it. */
export interface Call {
  /** The command subject's version, project and channel. */
  scope: Scope;
  agentId: string;
  agentTurnId: string;
  turnEpoch: number;
  toolCallId: string;
  stepId: string;
  toolName: string;
  /** The validated arguments (defaults and fixed values applied, keys sorted). */
  arguments: Record<string, unknown>;
  /** The tool.call card. */
  callCard: Card;
  /** What the mesh vouched for (the CG-Admission claims). */
  admission: Admission;
  /** Who made the call: "agent:<agent_id>" or "operator:<name>". */
  principal: string;
  /** The caller's mandate (CG-Mandate), checked against the card's mandate_sha256; "" when none. */
  mandate: string;
  /** Aborts on the tool's timeout, cancel_tool_call, a lost claim or shutdown; reason says which. */
  signal: AbortSignal;
  /** Which delivery of the command this is (1 = first). */
  delivery: number;
}

const PARTIAL = Symbol("utpmesh.partial");

/** A partial result: a success with incomplete output (§4.4). */
export interface PartialResult {
  [PARTIAL]: true;
  value: unknown;
}

/** partial marks a handler's value as a partial result. */
export function partial(value: unknown): PartialResult {
  return { [PARTIAL]: true, value };
}

/** isPartial reports whether v was made by partial(). */
export function isPartial(v: unknown): v is PartialResult {
  return typeof v === "object" && v !== null && (v as PartialResult)[PARTIAL] === true;
}

/** The UTP error codes of tool results (§13). */
export const ResultCodes = {
  badRequest: "bad_request",
  authFailed: "auth_failed",
  upstreamUnavailable: "upstream_unavailable",
  internalError: "internal_error",
  toolTimeout: "tool_timeout",
  canceled: "canceled",
  notFound: "not_found",
} as const;

/** A handler's failure with a UTP code: the call ends failed with it. */
export class ToolError extends Error {
  readonly code: string;
  readonly detail?: unknown;
  constructor(code: string, message: string, detail?: unknown) {
    super(message);
    this.name = "ToolError";
    this.code = code;
    this.detail = detail;
  }
}

/** fail returns a ToolError to throw: the call ends failed with code (lower snake case, §13) and message. */
export function fail(code: string, message: string, detail?: unknown): ToolError {
  return new ToolError(code, message, detail);
}
