/**
 * Arguments of a call (docs/protocol.md §12.1, §12.2): the registry's
 * options.args defaults and fixed values applied, then validated against
 * the tool's JSON Schema (draft 2020-12, or draft-07 when $schema names
 * it; format not asserted). The validator is Ajv, from the lockfile: the
 * reference implementation of both drafts in JavaScript, where a small
 * hand-written one would differ from the Go worker's at the edges.
 */
import { createRequire } from "node:module";

import type { ValidateFunction } from "ajv";

import { invalid } from "./errors.js";
import type { ToolOptions } from "./types.js";

const require = createRequire(import.meta.url);
type AjvLike = { compile(schema: object): ValidateFunction };
type AjvCtor = new (opts: object) => AjvLike;
const Ajv2020 = (require("ajv/dist/2020") as { default: AjvCtor }).default;
const AjvDraft7 = (require("ajv") as { default: AjvCtor }).default;

const opts = { strict: false, allErrors: true, validateFormats: false };
let ajv2020: AjvLike | undefined;
let ajv7: AjvLike | undefined;

/** compileSchema compiles a tool's parameters schema; it throws naming what is wrong. */
export function compileSchema(schema: Record<string, unknown>): ValidateFunction {
  const draft = typeof schema.$schema === "string" ? schema.$schema : "";
  const d7 = /^https?:\/\/json-schema\.org\/draft-07\/schema#?$/.test(draft);
  if (draft !== "" && !d7 && !/^https:\/\/json-schema\.org\/draft\/2020-12\/schema#?$/.test(draft)) {
    throw invalid(`parameters: $schema ${draft} is not draft 2020-12 (https://json-schema.org/draft/2020-12/schema) or draft-07`);
  }
  try {
    if (d7) return (ajv7 ??= new AjvDraft7(opts)).compile(schema);
    return (ajv2020 ??= new Ajv2020(opts)).compile(schema);
  } catch (err) {
    throw invalid(`parameters: not a valid JSON Schema: ${(err as Error).message}`);
  }
}

/** applyArgs applies options.args: defaults for top-level keys not sent (null counts as sent), then fixed values. */
export function applyArgs(args: Record<string, unknown>, o: ToolOptions | undefined): Record<string, unknown> {
  const out = { ...args };
  for (const [k, v] of Object.entries(o?.args?.defaults ?? {})) if (!(k in out)) out[k] = v;
  for (const [k, v] of Object.entries(o?.args?.fixed ?? {})) out[k] = v;
  return out;
}

/**
 * checkArgs validates args with v; the message names the first violation's
 * JSON pointer, e.g. "registry: invalid arguments: arguments/text: must be
 * string (and 1 more violation)".
 */
export function checkArgs(v: ValidateFunction, args: unknown): string | undefined {
  if (v(args)) return undefined;
  const errs = v.errors ?? [];
  const first = errs[0];
  const where = "arguments" + (first?.instancePath ?? "");
  let msg = `registry: invalid arguments: ${where}: ${first?.message ?? "does not match the schema"}`;
  if (first?.params && "additionalProperty" in first.params) msg += ` (${String(first.params.additionalProperty)})`;
  if (errs.length === 2) msg += " (and 1 more violation)";
  else if (errs.length > 2) msg += ` (and ${errs.length - 1} more violations)`;
  return msg;
}

/** sortKeys returns v with object keys sorted at every level (the arguments a tool sees, §12.2). */
export function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === "object") {
    const o = v as Record<string, unknown>;
    return Object.fromEntries(Object.keys(o).sort().map((k) => [k, sortKeys(o[k])]));
  }
  return v;
}
