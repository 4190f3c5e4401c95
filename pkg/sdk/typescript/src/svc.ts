/**
 * Requests to the mesh's services (docs/protocol.md §11.1): a JSON object
 * body, a reply that is an error when it carries the Svc-Error-Code header
 * or starts with {"error"; no responders is "unavailable".
 */
import { RequestError, TimeoutError, headers as natsHeaders } from "@nats-io/transport-node";
import type { Msg, MsgHdrs, NatsConnection } from "@nats-io/transport-node";

import { ErrorCodes, UtpmeshError } from "./errors.js";

/** DEFAULT_TIMEOUT_MS bounds every request (the Go clients' default). */
export const DEFAULT_TIMEOUT_MS = 10_000;

/** A decoded reply and its text (for callers that need raw bytes, e.g. the admission check). */
export interface Reply<T> {
  value: T;
  text: string;
}

/** Options of one request. */
export interface RequestOptions {
  timeoutMs?: number;
  headers?: Record<string, string>;
  /**
   * resendMs, when set, sends a copy of the request every resendMs while
   * no reply to any copy has come, and takes the first reply (for an op
   * the service applies once however many copies arrive: the dispatch,
   * §5.7). A copy that fails at once (no responders) ends the request
   * when no other copy is still waiting.
   */
  resendMs?: number;
}

/** DISPATCH_RESEND_MS is how often the agent client resends an unanswered dispatch request (the Go SDK's 2 s). */
export const DISPATCH_RESEND_MS = 2_000;

/** requestCopies is nc.request, resending per opts.resendMs (see RequestOptions). */
function requestCopies(nc: NatsConnection, subject: string, payload: string, timeout: number, opts: RequestOptions): Promise<Msg> {
  const hdrs = toHeaders(opts.headers);
  const every = opts.resendMs ?? 0;
  if (every <= 0) return nc.request(subject, payload, { timeout, headers: hdrs });
  const deadline = Date.now() + timeout;
  return new Promise<Msg>((resolve, reject) => {
    let settled = false;
    let waiting = 0;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const send = (): void => {
      const left = deadline - Date.now();
      if (settled || left <= 0) return;
      waiting++;
      nc.request(subject, payload, { timeout: left, headers: hdrs }).then(
        (m) => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          resolve(m);
        },
        (err) => {
          waiting--;
          if (settled || waiting > 0) return;
          settled = true;
          clearTimeout(timer);
          reject(err);
        },
      );
      timer = setTimeout(send, Math.min(every, Math.max(left, 1)));
    };
    send();
  });
}

/** toHeaders makes NATS headers from a plain record (exact case, §1). */
export function toHeaders(h: Record<string, string> | undefined): MsgHdrs | undefined {
  if (!h) return undefined;
  const out = natsHeaders();
  for (const [k, v] of Object.entries(h)) if (v !== "" && v !== undefined) out.set(k, v);
  return out;
}

/** request sends body to subject and decodes the reply, throwing a UtpmeshError on an error reply. */
export async function request<T>(nc: NatsConnection, subject: string, body: unknown, opts: RequestOptions = {}): Promise<Reply<T>> {
  const timeout = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  let m;
  try {
    m = await requestCopies(nc, subject, JSON.stringify(body ?? {}), timeout, opts);
  } catch (err) {
    throw requestError(subject, timeout, err);
  }
  const text = m.string();
  const code = m.headers?.get("Svc-Error-Code") ?? "";
  if (code !== "" || text.startsWith('{"error"')) {
    let e: { code?: string; message?: string; detail?: unknown } = {};
    try {
      e = (JSON.parse(text) as { error?: typeof e }).error ?? {};
    } catch {
      /* the header alone says it */
    }
    throw new UtpmeshError(e.code || code || "internal_error", `${subject}: ${e.message ?? text}`, { detail: e.detail });
  }
  try {
    return { value: JSON.parse(text) as T, text };
  } catch (err) {
    throw new UtpmeshError(ErrorCodes.badReply, `${subject}: the reply is not JSON: ${text.slice(0, 200)}`, { cause: err });
  }
}

/** requestError maps a nats.js request failure to a UtpmeshError. */
export function requestError(subject: string, timeoutMs: number, err: unknown): UtpmeshError {
  if (err instanceof UtpmeshError) return err;
  const e = err as Error;
  if ((err instanceof RequestError && err.isNoResponders()) || e?.name === "NoRespondersError") {
    return new UtpmeshError(ErrorCodes.unavailable, `${subject}: no responders: the service is down (is the mesh running?)`, { cause: err });
  }
  if (e?.name === "PermissionViolationError" || (e as { cause?: Error })?.cause?.name === "PermissionViolationError") {
    return new UtpmeshError(ErrorCodes.permissionDenied,
      `${subject}: this identity may not publish it (${e.message}): an agent identity uses its own agent's subjects only; connect with the identity of that agent or the project's`, { cause: err });
  }
  if (err instanceof TimeoutError || (err as { cause?: unknown })?.cause instanceof TimeoutError) {
    return new UtpmeshError(ErrorCodes.timeout,
      `${subject}: no reply within ${timeoutMs} ms (a permissions violation looks the same: may this identity publish it?)`, { cause: err });
  }
  return new UtpmeshError(ErrorCodes.unavailable, `${subject}: ${e?.message ?? String(err)}`, { cause: err });
}
