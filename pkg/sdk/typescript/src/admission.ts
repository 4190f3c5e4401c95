/**
 * Verifying a command's CG-Admission header (docs/protocol.md §5.7,
 * "Verifying a command", steps 1–6) with the mesh's admission keys from
 * svc.dispatch.keys. Go: utp.VerifyAdmission, worker.NATSAdmissions.
 */
import { createHash, createPublicKey, verify as edVerify } from "node:crypto";
import type { KeyObject } from "node:crypto";

import type { NatsConnection } from "@nats-io/transport-node";

import { ErrorCodes, UtpmeshError } from "./errors.js";
import * as subj from "./subjects.js";
import { request } from "./svc.js";
import type { Scope } from "./subjects.js";
import type { Admission, Command } from "./types.js";

/** The header of an admitted command. */
export const HEADER_ADMISSION = "CG-Admission";
/** The header carrying an admitted call's mandate. */
export const HEADER_MANDATE = "CG-Mandate";

function notAdmitted(why: string): UtpmeshError {
  return new UtpmeshError(ErrorCodes.notAdmitted, `not admitted by the mesh: ${why}`);
}

/** sha256Hex is the hex SHA-256 of s's UTF-8 bytes. */
export function sha256Hex(s: string): string {
  return createHash("sha256").update(s, "utf8").digest("hex");
}

/**
 * decodeAdmission splits and decodes a CG-Admission value (steps 1–2); it
 * throws a not_admitted error naming what is wrong.
 */
export function decodeAdmission(hdr: string | undefined): { claims: Admission; payload: string; sig: Buffer } {
  if (!hdr) throw notAdmitted(`the command has no ${HEADER_ADMISSION} header (dispatch calls through the mesh: svc.dispatch)`);
  const dot = hdr.indexOf(".");
  if (dot < 0) throw notAdmitted(`${HEADER_ADMISSION} is not <claims>.<signature>`);
  const payload = hdr.slice(0, dot);
  const sig64 = hdr.slice(dot + 1);
  const b64 = /^[A-Za-z0-9_-]*$/;
  if (!b64.test(payload) || !b64.test(sig64)) throw notAdmitted(`${HEADER_ADMISSION} is not base64url`);
  const sig = Buffer.from(sig64, "base64url");
  if (sig.length !== 64) throw notAdmitted(`${HEADER_ADMISSION} signature is not 64 base64url bytes`);
  let claims: Admission;
  try {
    claims = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as Admission;
  } catch (err) {
    throw notAdmitted(`${HEADER_ADMISSION} claims: ${(err as Error).message}`);
  }
  if (!claims || typeof claims !== "object" || claims.v !== 1) throw notAdmitted(`admission version ${claims?.v} (want 1)`);
  return { claims, payload, sig };
}

/**
 * matchAdmission compares the claims with the command received on subject
 * (step 5).
 */
export function matchAdmission(a: Admission, subject: string, cmd: Command): void {
  const pairs: [string, unknown, unknown][] = [
    ["subject", a.sub, subject], ["agent_id", a.agent_id, cmd.agent_id], ["agent_turn_id", a.agent_turn_id, cmd.agent_turn_id],
    ["turn_epoch", a.turn_epoch, cmd.turn_epoch], ["tool_call_id", a.tool_call_id, cmd.tool_call_id],
    ["tool_call_card_id", a.tool_call_card_id, cmd.tool_call_card_id], ["after_execution", a.after_execution, cmd.after_execution],
  ];
  for (const [name, admitted, got] of pairs) {
    if (admitted !== got) throw notAdmitted(`${name} ${JSON.stringify(got)} differs from the admitted ${JSON.stringify(admitted)}`);
  }
  if (cmd.tool_name && cmd.tool_name !== a.tool_name) {
    throw notAdmitted(`tool_name ${JSON.stringify(cmd.tool_name)} differs from the admitted ${JSON.stringify(a.tool_name)}`);
  }
}

/** checkCard compares the SHA-256 of the tool.call card's content bytes, as stored, with the claims (step 6). */
export function checkCard(a: Admission, rawContent: string): void {
  const got = sha256Hex(rawContent);
  if (got !== a.card_sha256) throw notAdmitted(`the tool.call card's content (sha256 ${got}) is not the admitted one (${a.card_sha256})`);
}

/** publicKeyFromRaw makes an Ed25519 KeyObject of a base64url 32-byte key. */
export function publicKeyFromRaw(b64url: string): KeyObject {
  const raw = Buffer.from(b64url, "base64url");
  if (raw.length !== 32) throw new UtpmeshError(ErrorCodes.badReply, `admission key is not a base64url Ed25519 public key (${raw.length} bytes)`);
  return createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: raw.toString("base64url") }, format: "jwk" });
}

/** verifySignature checks the Ed25519 signature of the claims part (step 4). */
export function verifySignature(key: KeyObject, payload: string, sig: Buffer, kid: string): void {
  if (!edVerify(null, Buffer.from(payload, "ascii"), key, sig)) {
    throw notAdmitted(`the ${HEADER_ADMISSION} signature does not verify under key ${kid}`);
  }
}

interface KeysReply {
  keys: { kid: string; public_key: string }[] | null;
  commands?: string;
}

/**
 * Admissions reads and caches the mesh's admission keys from
 * svc.dispatch.keys, re-reading them when a command names an unknown key id
 * (at most once a second), and reads a project's commands mode there.
 */
export class Admissions {
  private keys = new Map<string, KeyObject>();
  private fetchedAt = 0;

  constructor(private readonly nc: NatsConnection, private readonly timeoutMs = 5000) {}

  /**
   * verify checks hdr for cmd received on subject (steps 1–5). A
   * not_admitted error means refused; any other error means it could not
   * be checked now (retry later).
   */
  async verify(s: Scope, hdr: string | undefined, subject: string, cmd: Command): Promise<Admission> {
    const { claims, payload, sig } = decodeAdmission(hdr);
    const key = await this.key(s, claims.kid);
    verifySignature(key, payload, sig, claims.kid);
    matchAdmission(claims, subject, cmd);
    return claims;
  }

  /**
   * rawCommands reports whether the project accepts raw (unadmitted)
   * commands, read from the mesh at the time of asking: it is asked only
   * for a command that is not admitted, whose refusal then names the
   * project's current mode.
   */
  async rawCommands(s: Scope): Promise<boolean> {
    return this.fetch(s);
  }

  private async key(s: Scope, kid: string): Promise<KeyObject> {
    const k = this.keys.get(kid);
    if (k) return k;
    if (Date.now() - this.fetchedAt < 1000) {
      throw new UtpmeshError(ErrorCodes.unavailable, `unknown admission key id ${kid}; keys were fetched less than a second ago, retrying later`);
    }
    await this.fetch(s);
    const k2 = this.keys.get(kid);
    if (!k2) throw notAdmitted(`key ${kid} is not one of the mesh's admission keys`);
    return k2;
  }

  private async fetch(s: Scope): Promise<boolean> {
    const r = await request<KeysReply>(this.nc, subj.dispatchKeys(s), {}, { timeoutMs: this.timeoutMs });
    const keys = new Map<string, KeyObject>();
    for (const k of r.value.keys ?? []) keys.set(k.kid, publicKeyFromRaw(k.public_key));
    const raw = r.value.commands === "raw";
    this.keys = keys;
    this.fetchedAt = Date.now();
    return raw;
  }
}
