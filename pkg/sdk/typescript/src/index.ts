/**
 * @utpmesh/sdk: agent runtimes and tool workers of a utpmesh mesh in
 * TypeScript, on the official NATS client (docs/protocol.md is the
 * contract; the Go SDK, pkg/agent and pkg/worker, the reference).
 *
 * - {@link connectMesh}: connect as a mesh identity (nkey seed file, own inbox prefix).
 * - {@link AgentClient}: dispatch calls with a mandate, await wakeups, read results, resume, ack.
 * - {@link serve}: serve tools (register, discovery, admitted commands, claims, results, reports).
 * - {@link WindleyLoop}: a session bound to a booking: mandate_query before planning, again on each
 *   state transition (AgentClient.stateEvents), and no call of a tool the residual set forbids.
 */
export { connectMesh, inboxPrefix, loadIdentity } from "./connect.js";
export type { ConnectOptions, Identity } from "./connect.js";
export { AgentClient, PendingError } from "./agent.js";
export type { AgentConfig, CallRequest, CallState, Outcome, Pending, Phase, StateEventsOptions, TurnState } from "./agent.js";
export {
  HEM_MANDATE_GAP, MANDATE_QUERY, TOOL_INVOKE_HEM, TRIGGER_MANDATE_GAP, WINDLEY_SERVICE, WindleyLoop, invokeHemArguments, newMandateGap,
  queryMandate, resultCallId,
} from "./windley.js";
export type { MandateGap, QueryOptions, Requery, Resolution, WindleyLoopConfig } from "./windley.js";
export { AbortReasons, MISSING_CARD_DELIVERIES, Worker, serve, stderrLogger } from "./worker.js";
export type { LogLevel, Logger, WorkerOptions } from "./worker.js";
export { ResultCodes, ToolError, fail, isPartial, partial } from "./tool.js";
export type { Call, PartialResult, Tool } from "./tool.js";
export { SERVICE_NAME } from "./discovery.js";
export type { ToolStats } from "./discovery.js";
export { Admissions, HEADER_ADMISSION, HEADER_MANDATE, checkCard, decodeAdmission, matchAdmission } from "./admission.js";
export { ErrorCodes, UtpmeshError, isCode } from "./errors.js";
export { callKey, commandMsgId, isUUID, newTraceparent, traceId, uuidv7 } from "./ids.js";
export { rawValueAt } from "./rawjson.js";
export * as subjects from "./subjects.js";
export * from "./types.js";
