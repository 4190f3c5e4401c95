/**
 * The agent side of ATP's Windley Loop (docs/protocol.md §10.3, §10.4;
 * the ATP addendum's decisions MCP-D13 to MCP-D15): ask the PMO built-in
 * mandate_query which tools the mandate permits in the booking's current
 * state before planning, re-ask on each state transition of the booking
 * the session is bound to (a state event, never a timer) and on a new
 * mandate, and refuse, without dispatching, a tool the residual set
 * forbids. The Go counterpart is services/atp/windley (Loop, Follow).
 */
import type { AgentClient, CallRequest, Outcome } from "./agent.js";
import { ErrorCodes, UtpmeshError, invalid } from "./errors.js";
import { residualAllows } from "./types.js";
import type { Residual, StateEvent } from "./types.js";

/** The PMO built-in that runs the Windley query (§10.3). */
export const MANDATE_QUERY = "mandate_query";
/** The tool service whose bookings a loop follows by default. */
export const WINDLEY_SERVICE = "atp";
/** The ATP tool a mandate gap is escalated through. */
export const TOOL_INVOKE_HEM = "atp_invoke_hem";
/** The hem_id of mandate-gap escalations. */
export const HEM_MANDATE_GAP = "HEM-MANDATE-01";
/** The atp_invoke_hem context.trigger_reason of a mandate gap (MCP-D15). */
export const TRIGGER_MANDATE_GAP = "MANDATE_GAP_DETECTED";

/** Options of {@link queryMandate}. */
export interface QueryOptions {
  /** The booking's state; omitted: unknown (state-dependent conditions stay in the residual). */
  bookingState?: string;
  /** The mandate to evaluate; default the agent client's. */
  mandate?: string;
  /** Aborts the wait (the query goes on). */
  signal?: AbortSignal;
}

/**
 * queryMandate runs mandate_query for agent in turn agentTurnId and
 * returns the residual set. A query that does not succeed (a mandate that
 * does not verify, a mesh without the gate) throws with the result's
 * error code and message.
 */
export async function queryMandate(agent: AgentClient, agentTurnId: string, opts: QueryOptions = {}): Promise<Residual> {
  const args: Record<string, unknown> = {};
  if (opts.bookingState !== undefined) {
    if (typeof opts.bookingState !== "string" || opts.bookingState === "") {
      throw invalid(`booking_state ${JSON.stringify(opts.bookingState)} must be a non-empty state name (e.g. PRE_JOURNEY), or omitted when unknown`);
    }
    args.booking_state = opts.bookingState;
  }
  const out = await agent.call({ toolName: MANDATE_QUERY, agentTurnId, arguments: args, mandate: opts.mandate, signal: opts.signal });
  if (out.result.status !== "success") {
    const e = out.result.error;
    throw new UtpmeshError(e?.code || out.result.status, `mandate_query: ${out.result.status}: ${e?.message ?? "no error message"}`, { detail: e?.detail });
  }
  const r = out.result.result as Residual | undefined;
  if (!r || typeof r !== "object" || typeof r.context_block !== "string") {
    throw new UtpmeshError(ErrorCodes.badReply, `mandate_query answered ${JSON.stringify(r)?.slice(0, 200)}, not a residual set (§10.3)`);
  }
  return r;
}

/** One re-query a state event caused (the residual, or the error of the query). */
export interface Requery {
  event: StateEvent;
  residual?: Residual;
  error?: Error;
}

/** Configuration of a {@link WindleyLoop}. */
export interface WindleyLoopConfig {
  /** The agent whose session the loop keeps current. */
  agent: AgentClient;
  /** The turn the queries (and the loop's calls) belong to. */
  agentTurnId: string;
  /** The mandate to evaluate and to call with; default the agent client's. */
  mandate?: string;
  /** The tool service whose resource the session is bound to; default "atp". */
  service?: string;
}

/**
 * A HEM task's resolution as the invoking turn receives it: the result of
 * call "<atp_invoke_hem call id>.hem-result" (Go: windley.Resolution).
 */
export interface Resolution {
  task_id: string;
  /** COMPLETE or DECLINED. */
  status: string;
  hem_id: string;
  /** "operator" or "protocol_deadline". */
  confirmed_by?: string;
  declined_by?: string;
  /** The operator who decided. */
  operator?: string;
  reason?: string;
  /** The narrowed sub-mandate an approved HEM-MANDATE-01 expansion issued. */
  mandate?: string;
  mandate_jti?: string;
  granted_policy?: string;
  [key: string]: unknown;
}

/**
 * A structured mandate expansion request (MCP-D15): the exact Cedar
 * action and resource condition the mandate lacks (Go: windley.MandateGap).
 */
export interface MandateGap {
  /** The Cedar action, e.g. ATPAction::"update_pre_arrangement". */
  missing_action: string;
  /** The tool the plan needs. */
  tool_name: string;
  /** The resource the action is needed on, as a Cedar condition. */
  resource_condition: string;
  /** The booking the agent is bound to (null: none). */
  booking_object_id: string | null;
  /** For an atp_invoke_hem gap: the hem_id and the booking's state. */
  hem_id?: string;
  booking_state?: string;
  /** The mandate that lacks the action. */
  mandate_jti?: string;
  /** Why the action is needed. */
  agent_assessment: string;
}

/**
 * newMandateGap builds the expansion request for calling tool (whose
 * Cedar action is action; for atp_invoke_hem: with hemId) from residual r.
 * It throws invalid when r already permits the call: that is no gap.
 */
export function newMandateGap(r: Residual | undefined, tool: string, action: string, hemId: string, assessment: string): MandateGap {
  if (!r) throw invalid("no residual set: run the Windley query (WindleyLoop.start) first");
  if (!tool || !action || !assessment) throw invalid("a mandate gap needs the tool, its Cedar action and the agent's assessment");
  if (residualAllows(r, tool, hemId)) throw invalid(`${tool} is permitted: not a mandate gap, call it`);
  const g: MandateGap = {
    missing_action: action, tool_name: tool, resource_condition: `resource == Project::${JSON.stringify(r.project_id)}`,
    booking_object_id: null, agent_assessment: assessment,
  };
  if (r.mandate_jti) g.mandate_jti = r.mandate_jti;
  if (r.booking_object_id) {
    g.booking_object_id = r.booking_object_id;
    g.resource_condition = `resource == Booking::${JSON.stringify(r.booking_object_id)}`;
  }
  if (hemId) {
    g.hem_id = hemId;
    if (r.booking_state) g.booking_state = r.booking_state;
  }
  return g;
}

/**
 * invokeHemArguments are the atp_invoke_hem arguments that route gap g to
 * an operator: hem_id HEM-MANDATE-01, context.trigger_reason
 * MANDATE_GAP_DETECTED and the request (as JSON text) in
 * context.agent_assessment (Go: MandateGap.InvokeHEMArguments). Call
 * atp_invoke_hem with them through WindleyLoop.call(req, HEM_MANDATE_GAP).
 */
export function invokeHemArguments(g: MandateGap): Record<string, unknown> {
  const args: Record<string, unknown> = {
    hem_id: HEM_MANDATE_GAP,
    context: {
      trigger_reason: TRIGGER_MANDATE_GAP,
      agent_assessment: JSON.stringify(g),
      recommended_action: `issue a sub-mandate that adds ${g.missing_action} on ${g.resource_condition}`,
    },
  };
  if (g.booking_object_id) args.booking_object_id = g.booking_object_id;
  return args;
}

/** resultCallId is the tool_call_id of a HEM task's resolution: "<invoke call id>.hem-result". */
export function resultCallId(invokeCallId: string): string {
  return invokeCallId + ".hem-result";
}

/**
 * WindleyLoop keeps an agent session's permitted action space current:
 * follow() the booking's state events, then start() with the pre-session
 * query; each transition to a state the loop has not queried re-runs the
 * query (decision MCP-D14: state transitions, not a timer), and call()
 * refuses a tool the current residual set does not permit. A query that
 * fails leaves no residual set (nothing is permitted) until one succeeds;
 * the next event re-queries, even for the same state. Queries run
 * one at a time, in the order they were asked for, so the residual is
 * always the answer for the last state seen.
 */
export class WindleyLoop {
  readonly agent: AgentClient;
  readonly agentTurnId: string;
  readonly service: string;
  private currentMandate?: string;
  private state?: string;
  private current?: Residual;
  private lastError?: Error;
  private queried = false;
  private nQueries = 0;
  private nEvents = 0;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(cfg: WindleyLoopConfig) {
    if (!cfg?.agent) throw invalid("WindleyLoopConfig.agent is required: an AgentClient of the session's agent");
    if (!cfg.agentTurnId) throw invalid("WindleyLoopConfig.agentTurnId is required: the turn the queries belong to");
    this.agent = cfg.agent;
    this.agentTurnId = cfg.agentTurnId;
    this.currentMandate = cfg.mandate?.trim() || undefined;
    this.service = cfg.service ?? WINDLEY_SERVICE;
  }

  /**
   * follow subscribes to the state events of booking bookingId and re-runs
   * the query on each transition to a state the loop has not queried.
   * Call it before start(), so that no transition falls between the
   * pre-session query and the subscription. onRequery, when given, is
   * called after each re-query an event caused. Call the returned
   * function to stop following.
   */
  follow(bookingId: string, onRequery?: (r: Requery) => void): Promise<() => void> {
    return this.agent.stateEvents(this.service, bookingId, (ev) => {
      this.nEvents++;
      void this.bookingState(ev.new_state).then(
        ({ residual, requeried }) => requeried && onRequery?.({ event: ev, residual }),
        (error: Error) => {
          if (onRequery) onRequery({ event: ev, error });
          else process.emitWarning(`utpmesh: the Windley re-query for ${ev.resource_id} in ${ev.new_state} failed: ${error.message}`);
        },
      );
    });
  }

  /** start runs the pre-session query for bookingState (undefined: unknown). */
  start(bookingState?: string): Promise<Residual> {
    return this.enqueue(() => {
      this.state = bookingState;
      return this.requery();
    });
  }

  /**
   * bookingState reports the booking's state (after a call that may have
   * changed it, or from a state event); the loop re-queries when it
   * differs from the state of the last query. requeried says whether it did.
   */
  bookingState(state: string): Promise<{ residual?: Residual; requeried: boolean }> {
    return this.enqueue(async () => {
      if (this.queried && this.state === state) return { residual: this.current, requeried: false };
      this.state = state;
      return { residual: await this.requery(), requeried: true };
    });
  }

  /** newMandate replaces the mandate (an expansion was granted) and re-queries at once. */
  async newMandate(mandate: string): Promise<Residual> {
    if (typeof mandate !== "string" || mandate.trim() === "") throw invalid("newMandate needs the new mandate's token");
    return this.enqueue(() => {
      this.currentMandate = mandate.trim();
      return this.requery();
    });
  }

  /** The current residual set (undefined before the first query). */
  get residual(): Residual | undefined {
    return this.current;
  }

  /** The mandate the loop evaluates and calls with (undefined: the agent client's). */
  get mandate(): string | undefined {
    return this.currentMandate;
  }

  /** How many queries the loop has run. */
  get queries(): number {
    return this.nQueries;
  }

  /** How many state events follow() has received. */
  get events(): number {
    return this.nEvents;
  }

  /** idle resolves once every query asked for so far has run. */
  async idle(): Promise<void> {
    await this.queue.catch(() => undefined);
  }

  /** permits reports whether the current residual set permits tool (for atp_invoke_hem: with hemId). */
  permits(tool: string, hemId = ""): boolean {
    return residualAllows(this.current, tool, hemId);
  }

  /**
   * call makes the call req only when the residual set permits its tool
   * (for atp_invoke_hem: its hem_id, hemId), after every re-query already
   * asked for has run; otherwise it throws not_permitted and dispatches
   * nothing (MCP-D15: escalate the gap instead). req.mandate defaults to
   * the loop's mandate.
   */
  async call(req: CallRequest, hemId = ""): Promise<Outcome> {
    await this.idle();
    if (!this.permits(req?.toolName, hemId)) {
      const what = hemId ? `${req?.toolName} with hem_id ${hemId}` : req?.toolName;
      if (!this.current && this.lastError) {
        throw new UtpmeshError(ErrorCodes.notPermitted,
          `${what}: no residual set, the last mandate_query (booking state ${this.state ?? "unknown"}) failed: ${this.lastError.message}; nothing was dispatched: re-run the query (start, bookingState) first`);
      }
      const st = this.current?.booking_state ?? "unknown";
      throw new UtpmeshError(ErrorCodes.notPermitted,
        `${what} is not permitted by the current residual set (booking state ${st}); nothing was dispatched: escalate the gap (atp_invoke_hem with hem_id ${HEM_MANDATE_GAP}) instead of calling it`);
    }
    return this.agent.call({ ...req, mandate: req.mandate ?? this.currentMandate });
  }

  /**
   * readResolution reads the resolution of the atp_invoke_hem call
   * invokeCallId of the loop's turn (the card the agent's wakeup for
   * "<invokeCallId>.hem-result" points at); undefined before the task
   * has resolved.
   */
  async readResolution(invokeCallId: string): Promise<Resolution | undefined> {
    const r = await this.agent.findResult(this.agentTurnId, resultCallId(invokeCallId));
    if (!r) return undefined;
    const res = r.result.result as Resolution | undefined;
    if (!res || typeof res !== "object" || typeof res.status !== "string") {
      throw new UtpmeshError(ErrorCodes.badReply, `HEM resolution card ${r.card.card_id} holds ${JSON.stringify(res)?.slice(0, 200)}, not a resolution`);
    }
    return res;
  }

  /**
   * resolved applies a HEM task's resolution (seed §3.4A.3: HEM completion
   * and a mandate update re-query): a granted sub-mandate replaces the
   * loop's mandate and is queried at once; otherwise bookingState (read
   * after the resolution; undefined when unknown) re-queries if it changed.
   */
  async resolved(r: Resolution, bookingState?: string): Promise<Residual | undefined> {
    if (r.mandate) return this.newMandate(r.mandate);
    if (bookingState === undefined) return this.current;
    return (await this.bookingState(bookingState)).residual;
  }

  private enqueue<T>(f: () => Promise<T>): Promise<T> {
    const next = this.queue.catch(() => undefined).then(f);
    this.queue = next;
    return next;
  }

  private async requery(): Promise<Residual> {
    this.nQueries++;
    // Until this query answers, the state is not queried: a failed query
    // is re-run by the next event, even for the same state.
    this.queried = false;
    let r: Residual;
    try {
      r = await queryMandate(this.agent, this.agentTurnId, { bookingState: this.state, mandate: this.currentMandate });
    } catch (err) {
      // The residual of another state or mandate is no answer for this
      // one: until a query succeeds, nothing is permitted.
      this.current = undefined;
      this.lastError = err as Error;
      throw err;
    }
    this.lastError = undefined;
    this.current = r;
    this.queried = true;
    return r;
  }
}
