/**
 * The agent side (docs/protocol.md §5): dispatch a call through the mesh's
 * admission with a mandate, await its wakeup, read the result card, list
 * pending inbox entries and resume a turn after a restart, acknowledge.
 * The Go counterpart is pkg/agent.
 */
import type { NatsConnection, Subscription } from "@nats-io/transport-node";

import { ErrorCodes, UtpmeshError, invalid } from "./errors.js";
import { checkId, newTraceparent, traceId, uuidv7 } from "./ids.js";
import * as subj from "./subjects.js";
import { DISPATCH_RESEND_MS, request } from "./svc.js";
import type { Scope } from "./subjects.js";
import { decodeStateEvent, effectiveAfterExecution, isAfterExecution } from "./types.js";
import type {
  AfterExecution, Card, DispatchReply, DispatchRequest, EntryState, InboxEntry, StateEvent, ToolCallContent, ToolResultContent, Wakeup,
} from "./types.js";

/** Options of {@link AgentClient.stateEvents}. */
export interface StateEventsOptions {
  /** Called with a payload that is not a state event (it is skipped); default: a process warning. */
  onInvalid?: (err: UtpmeshError, subject: string) => void;
}

/** Configuration of an {@link AgentClient}. */
export interface AgentConfig {
  /** The connection, as the agent's identity (connectMesh with agent-<project>.nk). */
  nc: NatsConnection;
  /** The project (a subject token). */
  project: string;
  /** The agent id (a subject token): the mandate's sub, the wakeup subject's agent. */
  agentId: string;
  /** The channel of the agent's subjects; default "default". */
  channel?: string;
  /** The protocol version token; default v1r3. */
  version?: string;
  /** The signed mandate sent with every call unless the call carries its own (§5.6). */
  mandate?: string;
  /** How often a waiting call re-reads the inbox (a wakeup lost to a reconnect); default 2000 ms. */
  pollIntervalMs?: number;
  /** Timeout of each request to the mesh; default 10000 ms. */
  requestTimeoutMs?: number;
}

/** One tool call. */
export interface CallRequest {
  /** The registry name of the tool. */
  toolName: string;
  /** The turn making the call. */
  agentTurnId: string;
  /** The call's arguments, a JSON object; default {}. */
  arguments?: Record<string, unknown>;
  /** The turn's epoch (≥ 0); default 0. */
  turnEpoch?: number;
  /** The reasoning step; default a new UUIDv7. */
  stepId?: string;
  /** The step that caused this one. */
  parentStepId?: string;
  /** The call's id within the turn; default a new UUIDv7. Reusing an id is idempotent: the call's existing result answers. */
  toolCallId?: string;
  /** Overrides the registry entry's after_execution. */
  afterExecution?: AfterExecution;
  /** W3C trace context; default a new one. */
  traceparent?: string;
  /** The mandate of this call; default the config's. */
  mandate?: string;
  /** Extra keys of the tool.call card's metadata (not the typed ones, §5.7). */
  metadata?: Record<string, unknown>;
  /** Aborts the wait (not the call): call() then throws a {@link PendingError}. */
  signal?: AbortSignal;
}

/** A dispatched call: what a runtime keeps to match its wakeup later. */
export interface Pending {
  agentTurnId: string;
  turnEpoch: number;
  stepId: string;
  toolCallId: string;
  toolCallCardId: string;
  toolName: string;
  targetSubject: string;
  afterExecution?: AfterExecution;
  traceparent: string;
  /** False when the mesh refused the call: its auth_failed result arrives like any other. */
  admitted: boolean;
}

/** The end of a call. */
export interface Outcome {
  call: Pending;
  wakeup: Wakeup;
  resultCard: Card;
  result: ToolResultContent;
  /** The effective after_execution (§7.8). */
  afterExecution: AfterExecution;
}

/** Thrown by call() when the wait ends before the result: the call goes on and resume() finds it. */
export class PendingError extends UtpmeshError {
  readonly pending: Pending;
  constructor(p: Pending, why: string) {
    super("pending", `tool call ${p.toolCallId} (tool ${p.toolName}, turn ${p.agentTurnId}) still pending: ${why}; resume the turn to read its result later`);
    this.name = "PendingError";
    this.pending = p;
  }
}

/** Where a call of a turn stands, as resume() sees it. */
export type Phase = "outstanding" | "unconsumed" | "finished";

/** One call of a resumed turn. */
export interface CallState {
  toolCallId: string;
  stepId: string;
  toolName: string;
  phase: Phase;
  callCard?: Card;
  resultCard?: Card;
  result?: ToolResultContent;
  afterExecution?: AfterExecution;
  /** The call's inbox entry; ack() its inbox_id once consumed. */
  entry?: InboxEntry;
}

/** What resume() reports about a turn. */
export interface TurnState {
  agentTurnId: string;
  turnEpoch: number;
  calls: CallState[];
  outstanding: CallState[];
  unconsumed: CallState[];
  finished: CallState[];
}

const MAX_LIST = 1000;
/** The most inbox ids one ack takes (§11.5). */
const MAX_ACK = 1000;

type Waiter = (w: Wakeup) => void;

/**
 * AgentClient is one agent's client of the mesh. Create it with
 * {@link AgentClient.create}; close() it when done (the connection stays
 * the caller's).
 */
export class AgentClient {
  readonly scope: Scope;
  readonly agentId: string;
  private readonly nc: NatsConnection;
  private readonly mandate?: string;
  private readonly poll: number;
  private readonly timeout: number;
  private sub?: Subscription;
  private subReady?: Promise<void>;
  private readonly waiters = new Map<string, Waiter>();
  private listeners = new Set<(w: Wakeup) => void>();
  private closed = false;
  /** Lazy acks of finished calls whose answers have not come yet (call() does not wait for them). */
  private readonly acksInFlight = new Set<Promise<void>>();
  /** Lazy acks not sent yet: they leave together once the request in flight has its answer. */
  private ackQueue: { inboxId: string; done: () => void }[] = [];
  private ackSending = false;

  private constructor(cfg: AgentConfig) {
    this.scope = subj.scope(cfg.project, cfg.channel, cfg.version);
    subj.checkToken("agent_id", cfg.agentId);
    this.nc = cfg.nc;
    this.agentId = cfg.agentId;
    this.mandate = cfg.mandate?.trim() || undefined;
    this.poll = cfg.pollIntervalMs ?? 2000;
    this.timeout = cfg.requestTimeoutMs ?? 10_000;
  }

  /** create checks cfg and returns a client. */
  static create(cfg: AgentConfig): AgentClient {
    if (!cfg?.nc) throw invalid("AgentConfig.nc is required: connect with connectMesh({creds: 'utpmesh-data/creds/agent-<project>.nk'})");
    return new AgentClient(cfg);
  }

  /**
   * call makes one tool call and waits for its result: dispatch, wakeup
   * (or the inbox, re-read every pollIntervalMs), result card, lazy ack. A
   * failed tool is not an error: its Outcome's result.status says so.
   */
  async call(req: CallRequest): Promise<Outcome> {
    const { dispatch, pending, freshId } = this.prepare(req);
    await this.ensureSub();
    const key = waitKey(pending.agentTurnId, pending.toolCallId);
    let resolve!: (w: Wakeup) => void;
    const got = new Promise<Wakeup>((r) => (resolve = r));
    this.waiters.set(key, resolve);
    try {
      await this.send(dispatch, pending);
      const wk = await this.await(pending, got, !freshId, req.signal);
      return await this.finish(pending, wk);
    } finally {
      this.waiters.delete(key);
    }
  }

  /** dispatch sends the call through the mesh and returns without waiting; its result arrives as a wakeup and an inbox entry. */
  async dispatch(req: CallRequest): Promise<Pending> {
    const { dispatch, pending } = this.prepare(req);
    await this.send(dispatch, pending);
    return pending;
  }

  /**
   * wakeups calls fn with every wakeup of this agent until the returned
   * function is called. Wakeups are doorbells, delivered at least once:
   * the inbox entry is the truth (§5.3).
   */
  async wakeups(fn: (w: Wakeup) => void): Promise<() => void> {
    await this.ensureSub();
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /**
   * entries lists this agent's inbox entries (default: pending ones), following pages (§11.5);
   * toolCallId (with agentTurnId) asks for the entry of one call.
   */
  async entries(opts: { agentTurnId?: string; toolCallId?: string; state?: EntryState | "all" } = {}): Promise<InboxEntry[]> {
    await this.flush(); // this client's finished calls are acked
    const out: InboxEntry[] = [];
    let after: string | undefined;
    for (;;) {
      const q: Record<string, unknown> = { agent_id: this.agentId, state: opts.state ?? "pending", limit: MAX_LIST };
      if (opts.agentTurnId) q.agent_turn_id = opts.agentTurnId;
      if (opts.toolCallId) q.tool_call_id = opts.toolCallId;
      if (after) q.after = after;
      const r = await request<{ entries: InboxEntry[] | null }>(this.nc, subj.agentInbox(this.scope, "list", this.agentId), q, { timeoutMs: this.timeout });
      const page = r.value.entries ?? [];
      out.push(...page);
      if (page.length < MAX_LIST) return out;
      after = page[page.length - 1].inbox_id;
    }
  }

  /** ack acknowledges inbox entries; lazy lets the inbox write it with its next transaction (§11.5). Returns how many were pending. */
  async ack(inboxIds: string[], lazy = false): Promise<number> {
    if (inboxIds.length === 0) return 0;
    const body: Record<string, unknown> = { inbox_ids: inboxIds };
    if (lazy) body.lazy = true;
    const r = await request<{ acked: number }>(this.nc, subj.agentInbox(this.scope, "ack", this.agentId), body, { timeoutMs: this.timeout });
    return r.value.acked;
  }

  /** setEpoch raises a turn's epoch (a runtime restarting a turn calls it before dispatching at the new epoch, §9.3). */
  async setEpoch(agentTurnId: string, turnEpoch: number): Promise<number> {
    checkId("agent_turn_id", agentTurnId, true);
    const r = await request<{ turn_epoch: number }>(this.nc, subj.agentInbox(this.scope, "set_epoch", this.agentId),
      { agent_turn_id: agentTurnId, turn_epoch: turnEpoch }, { timeoutMs: this.timeout });
    return r.value.turn_epoch;
  }

  /** readResult reads and checks the tool.result card of a call. */
  async readResult(agentTurnId: string, toolCallId: string, cardId: string): Promise<{ card: Card; result: ToolResultContent }> {
    if (!cardId) throw new UtpmeshError(ErrorCodes.noResult, `tool_call_id ${toolCallId}: no tool_result_card_id`);
    let card: Card;
    try {
      card = (await request<{ card: Card }>(this.nc, subj.agentCardstore(this.scope, "get", this.agentId), { card_id: cardId }, { timeoutMs: this.timeout })).value.card;
    } catch (err) {
      if (err instanceof UtpmeshError && err.code === "not_found") {
        throw new UtpmeshError(ErrorCodes.noResult, `tool_call_id ${toolCallId}: tool.result card ${cardId} not found in project ${this.scope.project}`);
      }
      throw err;
    }
    if (card.type !== "tool.result" || card.tool_call_id !== toolCallId || card.metadata?.agent_turn_id !== agentTurnId) {
      throw new UtpmeshError(ErrorCodes.noResult,
        `card ${cardId} is a ${card.type} of tool_call_id ${card.tool_call_id} turn ${card.metadata?.agent_turn_id}, not the result of ${toolCallId} of turn ${agentTurnId}`);
    }
    return { card, result: card.content as ToolResultContent };
  }

  /**
   * resume reads what a runtime needs to pick a parked turn up again (after
   * a restart): the turn's cards and the agent's inbox entries of the turn,
   * and sorts its calls into outstanding (no result yet), unconsumed
   * (result not acknowledged: consume it, then ack its entry) and finished.
   */
  async resume(agentTurnId: string): Promise<TurnState> {
    checkId("agent_turn_id", agentTurnId, true);
    await this.flush(); // a call this client finished has no unconsumed result
    // Entries first, cards second: an entry's card is then always among the cards.
    const pending = await this.entries({ agentTurnId, state: "pending" });
    const cards = await this.turnCards(agentTurnId);
    const st: TurnState = { agentTurnId, turnEpoch: 0, calls: [], outstanding: [], unconsumed: [], finished: [] };
    const byId = new Map<string, CallState>();
    const get = (id: string) => {
      let cs = byId.get(id);
      if (!cs) {
        cs = { toolCallId: id, stepId: "", toolName: "", phase: "outstanding" };
        byId.set(id, cs);
      }
      return cs;
    };
    for (const c of cards) {
      st.turnEpoch = Math.max(st.turnEpoch, c.metadata?.turn_epoch ?? 0);
      if (c.type === "tool.call" && c.tool_call_id) {
        const cs = get(c.tool_call_id);
        if (cs.callCard) continue;
        cs.callCard = c;
        cs.stepId ||= c.metadata?.step_id ?? "";
        cs.toolName = (c.content as ToolCallContent)?.tool_name ?? "";
      } else if (c.type === "tool.result" && c.tool_call_id) {
        const cs = get(c.tool_call_id);
        if (cs.resultCard) continue;
        cs.resultCard = c;
        cs.stepId ||= c.metadata?.step_id ?? "";
        cs.toolName ||= c.metadata?.function_name ?? "";
        cs.result = c.content as ToolResultContent;
        cs.afterExecution = effectiveAfterExecution(cs.result);
      }
    }
    const pendingBy = new Map(pending.map((e) => [e.tool_call_id, e]));
    let needAll = false;
    for (const cs of byId.values()) {
      const e = pendingBy.get(cs.toolCallId);
      if (e) cs.entry = e;
      else if (cs.resultCard) needAll = true;
    }
    if (needAll) {
      for (const e of await this.entries({ agentTurnId, state: "all" })) {
        const cs = byId.get(e.tool_call_id);
        if (cs && !cs.entry) cs.entry = e;
      }
    }
    for (const cs of byId.values()) {
      if (!cs.resultCard && !cs.entry) cs.phase = "outstanding";
      else if (!cs.entry || cs.entry.state === "pending") cs.phase = "unconsumed";
      else cs.phase = "finished";
      st.calls.push(cs);
      st[cs.phase].push(cs);
    }
    return st;
  }

  /**
   * stateEvents subscribes to the state events (§10.4) of resource ("*":
   * every resource) of service ("*": every service) in the client's
   * project and calls handler with each, in the order the server delivers
   * them. The subscription is registered with the server before the
   * returned promise resolves (a flush), so a transition committed
   * afterwards is delivered: subscribe before the pre-session
   * mandate_query. A payload that is not a state event goes to
   * opts.onInvalid (default: a process warning) and is skipped. A
   * subscription the server refuses (this identity's permissions: an
   * agent identity may subscribe to its own project's state events only)
   * throws permission_denied. Call the returned function to stop.
   */
  async stateEvents(service: string, resource: string, handler: (ev: StateEvent) => void, opts: StateEventsOptions = {}): Promise<() => void> {
    if (this.closed) throw new UtpmeshError(ErrorCodes.closed, "the agent client is closed");
    if (typeof handler !== "function") throw invalid("stateEvents needs a handler: (ev: StateEvent) => void");
    let pattern: string;
    try {
      pattern = subj.stateEventPattern(this.scope.project, service, resource, this.scope.version);
    } catch (err) {
      throw invalid(`state events of service ${JSON.stringify(service)} resource ${JSON.stringify(resource)}: ${(err as Error).message} (a resource id is one subject token: letters, digits, - and _; or "*")`);
    }
    const onInvalid = opts.onInvalid ?? ((err: UtpmeshError, subject: string) => process.emitWarning(`utpmesh: state event on ${subject} skipped: ${err.message}`));
    let refused: Error | undefined;
    const sub = this.nc.subscribe(pattern, {
      callback: (err, m) => {
        if (err) {
          refused = err;
          return;
        }
        let ev: StateEvent;
        try {
          ev = decodeStateEvent(m.string());
        } catch (e) {
          onInvalid(e as UtpmeshError, m.subject);
          return;
        }
        handler(ev);
      },
    });
    try {
      // The server answers the PING after the SUB (and its -ERR, if any).
      await this.nc.flush();
    } catch (err) {
      sub.unsubscribe();
      throw new UtpmeshError(ErrorCodes.unavailable, `subscribe to ${pattern}: ${(err as Error).message}`, { cause: err });
    }
    if (refused) {
      sub.unsubscribe();
      throw new UtpmeshError(ErrorCodes.permissionDenied, `subscribe to ${pattern}: ${refused.message}: an agent identity may subscribe to its own project's state events only`, { cause: refused });
    }
    return () => sub.unsubscribe();
  }

  /**
   * findResult reads the tool.result card of call toolCallId of turn
   * agentTurnId (svc.cardstore.find_result, §11.3), or undefined when
   * there is none yet. A HEM task's resolution is such a card (the call
   * "<invoke call id>.hem-result", see WindleyLoop.readResolution).
   */
  async findResult(agentTurnId: string, toolCallId: string): Promise<{ card: Card; result: ToolResultContent } | undefined> {
    checkId("agent_turn_id", agentTurnId, true);
    checkId("tool_call_id", toolCallId, true);
    let card: Card;
    try {
      card = (await request<{ card: Card }>(this.nc, subj.agentCardstore(this.scope, "find_result", this.agentId),
        { agent_turn_id: agentTurnId, tool_call_id: toolCallId }, { timeoutMs: this.timeout })).value.card;
    } catch (err) {
      if (err instanceof UtpmeshError && err.code === "not_found") return undefined;
      throw err;
    }
    if (card?.type !== "tool.result" || card.tool_call_id !== toolCallId) {
      throw new UtpmeshError(ErrorCodes.badReply, `find_result of ${toolCallId} in turn ${agentTurnId} answered card ${card?.card_id} (${card?.type} of ${card?.tool_call_id})`);
    }
    return { card, result: card.content as ToolResultContent };
  }

  /** close stops the wakeup subscription (waiting calls end with a PendingError), then waits for the lazy acks in flight. */
  async close(): Promise<void> {
    this.closed = true;
    this.sub?.unsubscribe();
    this.sub = undefined;
    await this.flush();
  }

  /**
   * flush waits until the inbox has answered the lazy acks of the calls that
   * finished before it (call() does not wait for them). entries(), resume()
   * and close() flush by themselves. A failed lazy ack is not thrown: its entry
   * stays pending and resume() lists the result as unconsumed (§11.5).
   */
  async flush(): Promise<void> {
    await Promise.all([...this.acksInFlight]);
  }

  private async turnCards(agentTurnId: string): Promise<Card[]> {
    const out: Card[] = [];
    let after = 0;
    for (;;) {
      const body: Record<string, unknown> = { agent_turn_id: agentTurnId, limit: MAX_LIST };
      if (after) body.after = after;
      const r = await request<{ cards: Card[] | null; next?: number }>(this.nc, subj.agentCardstore(this.scope, "list_turn", this.agentId), body, { timeoutMs: this.timeout });
      out.push(...(r.value.cards ?? []));
      if (!r.value.next) return out;
      after = r.value.next;
    }
  }

  private prepare(req: CallRequest): { dispatch: DispatchRequest; pending: Pending; freshId: boolean } {
    if (this.closed) throw new UtpmeshError(ErrorCodes.closed, "the agent client is closed");
    if (!req?.toolName) throw invalid("tool_name is required");
    const freshId = !req.toolCallId;
    const toolCallId = req.toolCallId || uuidv7();
    const stepId = req.stepId || uuidv7();
    checkId("tool_name", req.toolName, true);
    checkId("agent_turn_id", req.agentTurnId, true);
    checkId("tool_call_id", toolCallId, true);
    checkId("step_id", stepId, true);
    checkId("parent_step_id", req.parentStepId, false);
    const epoch = req.turnEpoch ?? 0;
    if (!Number.isSafeInteger(epoch) || epoch < 0) throw invalid(`turn_epoch ${epoch} must be an integer ≥ 0`);
    if (req.afterExecution !== undefined && !isAfterExecution(req.afterExecution)) {
      throw invalid(`after_execution ${JSON.stringify(req.afterExecution)} is not suspend or terminate`);
    }
    const args = req.arguments ?? {};
    if (typeof args !== "object" || args === null || Array.isArray(args)) throw invalid(`arguments of tool ${req.toolName} must be a JSON object`);
    const tp = req.traceparent || newTraceparent();
    if (!traceId(tp)) throw invalid(`traceparent ${JSON.stringify(tp)} is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)`);
    for (const k of Object.keys(req.metadata ?? {})) {
      if (TYPED_METADATA.has(k)) throw invalid(`metadata key ${JSON.stringify(k)} is written by the mesh; use another key`);
    }
    const dispatch: DispatchRequest = {
      agent_id: this.agentId, agent_turn_id: req.agentTurnId, turn_epoch: epoch, step_id: stepId,
      tool_call_id: toolCallId, tool_name: req.toolName, arguments: args, traceparent: tp,
    };
    if (req.parentStepId) dispatch.parent_step_id = req.parentStepId;
    if (req.afterExecution) dispatch.after_execution = req.afterExecution;
    const mandate = req.mandate?.trim() || this.mandate;
    if (mandate) dispatch.mandate = mandate;
    if (req.metadata && Object.keys(req.metadata).length > 0) dispatch.metadata = req.metadata;
    const pending: Pending = {
      agentTurnId: req.agentTurnId, turnEpoch: epoch, stepId, toolCallId, toolCallCardId: "", toolName: req.toolName,
      targetSubject: "", afterExecution: req.afterExecution, traceparent: tp, admitted: false,
    };
    return { dispatch, pending, freshId };
  }

  private async send(d: DispatchRequest, p: Pending): Promise<void> {
    let r: DispatchReply;
    try {
      // The admission is idempotent per tool_call_id (§5.7): a request
      // the answering node took with it when it died is sent again.
      r = (await request<DispatchReply>(this.nc, subj.dispatchCall(this.scope, this.agentId), d,
        { timeoutMs: this.timeout, resendMs: DISPATCH_RESEND_MS })).value;
    } catch (err) {
      if (err instanceof UtpmeshError) {
        if (err.code === "not_found") {
          throw new UtpmeshError(ErrorCodes.unknownTool, `tool ${JSON.stringify(d.tool_name)} is not registered in project ${this.scope.project}: ${err.message}`, { cause: err });
        }
        if (err.code === ErrorCodes.unavailable) {
          throw new UtpmeshError(err.code, `dispatch tool_call_id ${d.tool_call_id} (tool ${d.tool_name}): ${err.message} (the mesh's admission service answers on svc.dispatch)`, { cause: err });
        }
      }
      throw err;
    }
    if (!r.tool_call_card_id || !r.target_subject) {
      throw new UtpmeshError(ErrorCodes.badReply, `dispatch reply of tool_call_id ${d.tool_call_id} names no tool.call card or target subject`);
    }
    p.toolCallCardId = r.tool_call_card_id;
    p.targetSubject = r.target_subject;
    p.afterExecution = r.after_execution;
    if (r.step_id) p.stepId = r.step_id;
    p.admitted = r.admitted;
  }

  private ensureSub(): Promise<void> {
    if (this.closed) return Promise.reject(new UtpmeshError(ErrorCodes.closed, "the agent client is closed"));
    if (!this.subReady) {
      this.sub = this.nc.subscribe(subj.wakeup(this.scope, this.agentId), {
        callback: (err, m) => {
          if (err) return;
          let w: Wakeup;
          try {
            w = m.json<Wakeup>();
          } catch {
            return;
          }
          this.waiters.get(waitKey(w.agent_turn_id, w.tool_call_id))?.(w);
          for (const l of this.listeners) l(w);
        },
      });
      // The flush is a PING/PONG: once it returns the server has the
      // subscription, so no wakeup can pass it by (§5.1, step 1).
      this.subReady = this.nc.flush();
    }
    return this.subReady;
  }

  private await(p: Pending, got: Promise<Wakeup>, checkFirst: boolean, signal?: AbortSignal): Promise<Wakeup> {
    const state = checkFirst ? "all" : "pending";
    return new Promise<Wakeup>((resolve, reject) => {
      let done = false;
      const end = (f: () => void) => {
        if (done) return;
        done = true;
        clearInterval(timer);
        signal?.removeEventListener("abort", onAbort);
        f();
      };
      const check = async () => {
        try {
          const es = await this.entries({ agentTurnId: p.agentTurnId, toolCallId: p.toolCallId, state });
          const e = es.find((x) => x.tool_call_id === p.toolCallId);
          if (e) end(() => resolve(entryWakeup(e)));
        } catch {
          /* the subscription and the next poll go on */
        }
      };
      const timer = setInterval(() => {
        if (this.closed) end(() => reject(new PendingError(p, "the client was closed")));
        else void check();
      }, this.poll);
      const onAbort = () => end(() => reject(new PendingError(p, `the wait was aborted (${String(signal?.reason ?? "abort")})`)));
      if (signal?.aborted) return onAbort();
      signal?.addEventListener("abort", onAbort);
      got.then((w) => end(() => resolve(w)));
      if (checkFirst) void check();
    });
  }

  private async finish(p: Pending, w: Wakeup): Promise<Outcome> {
    const { card, result } = carriedResult(w, this.scope.project, p.agentTurnId, p.toolCallId)
      ?? await this.readResult(p.agentTurnId, p.toolCallId, w.tool_result_card_id);
    const out: Outcome = { call: p, wakeup: w, resultCard: card, result, afterExecution: effectiveAfterExecution(result) };
    if (!w.inbox_id) throw new UtpmeshError("not_acked", `the wakeup of tool_call_id ${p.toolCallId} has no inbox_id`);
    // A lazy ack: the result is read; an ack lost to an inbox crash only
    // makes a resuming runtime see this result again (§11.5). So the call
    // does not wait for its answer either (flush() does).
    const ack: Promise<void> = this.ackLazy(w.inbox_id).finally(() => this.acksInFlight.delete(ack));
    this.acksInFlight.add(ack);
    return out;
  }

  /**
   * ackLazy queues a lazy ack of inboxId; the promise settles (never
   * rejects: a failed ack leaves the entry pending, and resume() shows the
   * result again) once the inbox has answered it. One request is in flight
   * at a time and the acks queued meanwhile leave together in the next, as
   * group commit does: a lone call's ack leaves at once.
   */
  private ackLazy(inboxId: string): Promise<void> {
    const p = new Promise<void>((done) => this.ackQueue.push({ inboxId, done }));
    if (!this.ackSending) void this.sendAcks();
    return p;
  }

  private async sendAcks(): Promise<void> {
    this.ackSending = true;
    try {
      while (this.ackQueue.length > 0) {
        const batch = this.ackQueue.splice(0, MAX_ACK);
        const ids = batch.map((a) => a.inboxId);
        try {
          await this.ack(ids, true);
        } catch (err) {
          // One id without an entry (its turn deleted meanwhile) fails the
          // whole request: ack each alone, so only that one stays pending.
          if (ids.length > 1 && err instanceof UtpmeshError && err.code === "not_found") {
            for (const id of ids) await this.ack([id], true).catch(() => undefined);
          }
        }
        for (const a of batch) a.done();
      }
    } finally {
      this.ackSending = false;
    }
  }
}

/**
 * carriedResult returns the tool.result card a wakeup carries (§8.2,
 * result_card) when it is the card the wakeup names, of the project and
 * the call; otherwise undefined, and the caller reads the card.
 */
export function carriedResult(w: Wakeup, project: string, agentTurnId: string, toolCallId: string): { card: Card; result: ToolResultContent } | undefined {
  const card = w.result_card;
  if (!card || typeof card !== "object") return undefined;
  if (card.card_id !== w.tool_result_card_id || card.project_id !== project || card.type !== "tool.result" ||
    card.tool_call_id !== toolCallId || card.metadata?.agent_turn_id !== agentTurnId || !card.content || typeof card.content !== "object") {
    return undefined;
  }
  return { card, result: card.content as ToolResultContent };
}

const TYPED_METADATA = new Set(["agent_id", "agent_turn_id", "turn_epoch", "step_id", "tool_call_id", "trace_id",
  "parent_step_id", "function_name", "role", "mandate", "mandate_jti", "mandate_sha256", "admission", "traceparent"]);

function waitKey(turn: string, call: string): string {
  return `${turn}\u0000${call}`;
}

function entryWakeup(e: InboxEntry): Wakeup {
  return {
    agent_id: e.agent_id, inbox_id: e.inbox_id, reason: "tool_result", agent_turn_id: e.agent_turn_id,
    turn_epoch: e.turn_epoch, tool_call_id: e.tool_call_id, tool_result_card_id: e.tool_result_card_id,
    status: e.status, after_execution: e.after_execution, step_id: e.step_id,
  };
}
