/**
 * Connecting as a mesh identity (docs/protocol.md §2.8): an nkey seed file
 * (`<data>/creds/*.nk` of `utpmesh up`, or one `utpmesh identity add`
 * wrote) or a NATS .creds file, and the identity's own reply-inbox prefix
 * `_INBOX.<public nkey>`, the only inbox the server lets it subscribe to.
 */
import { readFileSync } from "node:fs";

import { fromSeed } from "@nats-io/nkeys";
import { AuthorizationError, connect, credsAuthenticator, nkeyAuthenticator } from "@nats-io/transport-node";
import type { Authenticator, NatsConnection } from "@nats-io/transport-node";

import { ErrorCodes, UtpmeshError } from "./errors.js";
import * as subj from "./subjects.js";

/** An identity read from a credentials file. */
export interface Identity {
  /** The identity's public nkey (U…). */
  publicKey: string;
  /** Its reply-inbox prefix: _INBOX.<publicKey>. */
  inboxPrefix: string;
  /** The authenticator to pass to connect. */
  authenticator: Authenticator;
}

const SEED = /^\s*(SU[A-Z2-7]{50,})\s*$/m;

/** inboxPrefix is the reply-inbox prefix of the identity whose public nkey is pub. */
export const inboxPrefix = subj.inboxPrefix;

/**
 * loadIdentity reads the credentials file path: an nkey seed file (*.nk) or
 * a NATS .creds file (JWT and seed). The seed stays in the process: the
 * server checks a signature of its nonce.
 */
export function loadIdentity(path: string): Identity {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new UtpmeshError(ErrorCodes.creds,
      `credentials ${path}: ${(err as Error).message} (pass --creds FILE or set NATS_CREDS; 'utpmesh up' writes them under DATA/creds)`, { cause: err });
  }
  const m = SEED.exec(text);
  if (!m) {
    throw new UtpmeshError(ErrorCodes.creds, `credentials ${path}: no nkey user seed (SU…) in it (want an nkey seed file or a .creds file)`);
  }
  const seed = new TextEncoder().encode(m[1]);
  let pub: string;
  try {
    pub = fromSeed(seed).getPublicKey();
  } catch (err) {
    throw new UtpmeshError(ErrorCodes.creds, `credentials ${path}: ${(err as Error).message} (want an nkey seed file or a .creds file)`, { cause: err });
  }
  const authenticator = text.includes("BEGIN NATS USER JWT")
    ? credsAuthenticator(new TextEncoder().encode(text))
    : nkeyAuthenticator(seed);
  return { publicKey: pub, inboxPrefix: inboxPrefix(pub), authenticator };
}

/** Options of {@link connectMesh}. */
export interface ConnectOptions {
  /** NATS URL(s); default $NATS_URL, else nats://127.0.0.1:4222. */
  servers?: string | string[];
  /** Credentials file; default $NATS_CREDS. None: connect without (a mesh run with --insecure). */
  creds?: string;
  /** Connection name shown by the server. */
  name?: string;
}

/**
 * connectMesh connects to a mesh as the identity of opts.creds (or
 * $NATS_CREDS), with its reply-inbox prefix set.
 */
export async function connectMesh(opts: ConnectOptions = {}): Promise<NatsConnection> {
  const servers = opts.servers ?? process.env.NATS_URL ?? "nats://127.0.0.1:4222";
  const creds = opts.creds ?? process.env.NATS_CREDS;
  const id = creds ? loadIdentity(creds) : undefined;
  try {
    return await connect({
      servers,
      name: opts.name,
      authenticator: id?.authenticator,
      inboxPrefix: id?.inboxPrefix,
    });
  } catch (err) {
    const auth = err instanceof AuthorizationError || /authori[sz]ation/i.test((err as Error).message);
    const hint = !auth
      ? "(is the mesh running there? pass servers or set NATS_URL)"
      : creds
        ? `as ${creds} (is it a seed of this mesh, utpmesh-data/creds/…?)`
        : "without credentials (pass creds, an agent-<project>.nk or worker-<service>.nk of the mesh, or set NATS_CREDS)";
    throw new UtpmeshError(auth ? ErrorCodes.creds : ErrorCodes.unavailable, `connect to ${String(servers)} ${hint}: ${(err as Error).message}`, { cause: err });
  }
}
