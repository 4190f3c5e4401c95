/**
 * Errors of the SDK. Every error the SDK throws is a {@link UtpmeshError}
 * with a `code`: the svc error codes of docs/protocol.md §11.2 for replies
 * of the mesh's services, and the SDK's own codes below for what it checks
 * itself. Switch on `code`; show `message`, which names what was wrong and
 * what to do instead.
 */

/** Codes the SDK sets itself (the mesh's svc codes are passed through). */
export const ErrorCodes = {
  /** A call, a tool definition or an argument breaks a rule; the message names it. */
  invalid: "invalid",
  /** A credentials file is missing or is not an nkey seed or .creds file. */
  creds: "creds",
  /** Nothing answers the subject: the service (or the mesh) is down. */
  unavailable: "unavailable",
  /** No reply within the request's timeout. */
  timeout: "timeout",
  /** A reply that is not the JSON the protocol says. */
  badReply: "bad_reply",
  /** The tool is not registered in the project. */
  unknownTool: "unknown_tool",
  /** A result card is missing or does not belong to the call. */
  noResult: "no_result",
  /** The client was closed. */
  closed: "closed",
  /**
   * The NATS server refused this identity a publish or a subscription (its
   * permissions, docs/security.md): not the services' "forbidden", which a
   * service answers to a request it received.
   */
  permissionDenied: "permission_denied",
  /** A Windley loop's residual set does not permit the tool: nothing was dispatched (§10.3). */
  notPermitted: "not_permitted",
  /** A command's CG-Admission does not verify (docs/protocol.md §5.7). */
  notAdmitted: "not_admitted",
} as const;

/** Base class of every SDK error. */
export class UtpmeshError extends Error {
  /** The error code: one of {@link ErrorCodes} or a svc error code (§11.2). */
  readonly code: string;
  /** Code-specific detail of a svc error reply, when it had one. */
  readonly detail?: unknown;
  constructor(code: string, message: string, opts?: { detail?: unknown; cause?: unknown }) {
    super(message, opts?.cause !== undefined ? { cause: opts.cause } : undefined);
    this.name = "UtpmeshError";
    this.code = code;
    this.detail = opts?.detail;
  }
}

/** isCode reports whether err is a UtpmeshError with the given code. */
export function isCode(err: unknown, code: string): boolean {
  return err instanceof UtpmeshError && err.code === code;
}

/** invalid returns an {@link ErrorCodes.invalid} error. */
export function invalid(message: string): UtpmeshError {
  return new UtpmeshError(ErrorCodes.invalid, message);
}
