// Unit tests of the SDK's protocol rules; no mesh needed. Expected values
// come from docs/protocol.md and the Go reference implementation.
import assert from "node:assert/strict";
import { generateKeyPairSync, sign } from "node:crypto";
import { describe, it } from "node:test";

import { errors as natsErrors, headers } from "@nats-io/transport-node";

import { checkCard, decodeAdmission, matchAdmission, publicKeyFromRaw, sha256Hex, verifySignature } from "../src/admission.js";
import { parseCommand } from "../src/command.js";
import { callKey, commandMsgId, isUUID, traceId, uuidv7 } from "../src/ids.js";
import { rawValueAt } from "../src/rawjson.js";
import { applyArgs, checkArgs, compileSchema } from "../src/schema.js";
import * as subj from "../src/subjects.js";
import type { Admission, Card, Command, Wakeup } from "../src/types.js";
import { decodeStateEvent, effectiveAfterExecution, residualAllows } from "../src/types.js";
import { AgentClient, carriedResult } from "../src/agent.js";
import { UtpmeshError } from "../src/errors.js";
import { requestError } from "../src/svc.js";
import { WindleyLoop, resultCallId } from "../src/windley.js";
import type { WindleyLoopConfig } from "../src/windley.js";
import { serve } from "../src/worker.js";
import type { NatsConnection } from "@nats-io/transport-node";

describe("subjects", () => {
  it("names tokens, consumers and endpoints as the Go SDK does", () => {
    const cases: [string, string, string][] = [
      // tool name, consumer, ToolToken
      ["echo", "utp_tool_echo", "echo"],
      ["artifact.put", "utp_tool_artifact_put_25d0e43c", "artifact_put_25d0e43c"],
    ];
    for (const [tool, consumer, token] of cases) {
      assert.equal(subj.toolConsumer(tool), consumer);
      assert.equal(subj.toolToken(tool), token);
    }
    assert.equal(subj.toolToken("héllo wörld"), "h__llo_w__rld_a1003f7d");
    assert.equal(subj.endpointName("artifact.put"), "artifact_put_25d0e43c");
  });
  it("builds the agent's and the worker's subjects", () => {
    const s = subj.scope("demo", "main");
    assert.equal(subj.dispatchCall(s, "planner"), "cg.v1r3.demo.main.svc.dispatch.call.planner");
    assert.equal(subj.wakeup(s, "planner"), "cg.v1r3.demo.main.cmd.agent.planner.wakeup");
    assert.equal(subj.workerCardstore(s, "put_result", "artifact.put"), "cg.v1r3.demo.main.svc.cardstore.put_result.artifact_put_25d0e43c");
    assert.equal(subj.agentCardstore(s, "get", "planner"), "cg.v1r3.demo.main.svc.cardstore.get.planner");
    assert.equal(subj.agentInbox(s, "ack", "planner"), "cg.v1r3.demo.main.svc.inbox.ack.planner");
    assert.equal(subj.registryPut(s, "echo"), "cg.v1r3.demo.main.svc.registry.put.echo");
    assert.equal(subj.commandFilter("echo"), "cg.v1r3.*.*.cmd.tool.echo");
  });
  it("refuses bad tokens and redirected templates, naming them", () => {
    assert.throws(() => subj.scope("de mo"), /project_id "de mo" is not a subject token/);
    assert.throws(() => subj.wakeup(subj.scope("demo"), "a.b"), /agent_id "a.b"/);
    const s = subj.scope("demo", "main");
    assert.equal(subj.renderTemplate("cg.{ver}.{project_id}.{channel_id}.cmd.tool.echo", s), "cg.v1r3.demo.main.cmd.tool.echo");
    assert.throws(() => subj.renderTemplate("cg.{ver}.other.{channel_id}.cmd.tool.echo", s), /refusing to redirect/);
    assert.throws(() => subj.parseCommand("cg.v1r3.demo.main.cmd.agent.x.wakeup"), /not a tool command subject/);
    assert.deepEqual(subj.parseCommand("cg.v1r3.demo.main.cmd.tool.search.call"), { version: "v1r3", project: "demo", channel: "main", target: "search.call" });
  });
});

describe("ids", () => {
  it("makes the command id of §3.1", () => {
    assert.equal(commandMsgId("demo", "turn-1", "01a1fb9f-f5e4-77b7-a08f-1d9cba242476"),
      "cmd-3a6d7f2f79a559aa06aedde2d8e9f0bd0361582d3d88c2f6f79fd5ffbfe9fd44");
    assert.notEqual(commandMsgId("demo", "t-1", "2"), commandMsgId("demo", "t", "1-2"));
  });
  it("escapes claim keys as §7.4 says", () => {
    const cases: [string, string, string][] = [
      ["t-1", "c/2", "toolcall/t-1/c/2"], ["t/1", "c", "toolcall/t%2F1/c"], ["50%", "c", "toolcall/50%25/c"],
      ["a/b", "c", "toolcall/a%2Fb/c"], ["a", "b/c", "toolcall/a/b/c"],
    ];
    for (const [turn, call, key] of cases) assert.equal(callKey(turn, call), key);
  });
  it("makes v7 UUIDs and reads trace ids", () => {
    const id = uuidv7();
    assert.ok(isUUID(id) && id[14] === "7", id);
    assert.ok(!isUUID(id.toUpperCase()));
    assert.equal(traceId("00-803c4b1a1f71da2450806502a9097199-be99ba026d83de52-01"), "803c4b1a1f71da2450806502a9097199");
    assert.equal(traceId("00-00000000000000000000000000000000-be99ba026d83de52-01"), "");
  });
});

describe("rawValueAt", () => {
  it("returns a value's exact text", () => {
    const text = '{"claim":{"token":1},"call_card":{"card_id":"x","content":{"price":1.50,"s":"a\\"}b","n":[1,{"k":null}]},"z":2}}';
    assert.equal(rawValueAt(text, ["call_card", "content"]), '{"price":1.50,"s":"a\\"}b","n":[1,{"k":null}]}');
    assert.equal(rawValueAt(text, ["claim", "token"]), "1");
    assert.equal(rawValueAt(text, ["call_card", "missing"]), undefined);
    assert.equal(rawValueAt(text, ["nope"]), undefined);
  });
});

describe("admission", () => {
  const { publicKey, privateKey } = generateKeyPairSync("ed25519");
  const pubRaw = (publicKey.export({ format: "jwk" }) as { x: string }).x;
  const content = '{"tool_name":"echo","arguments":{"text":"hello"},"target_subject":"cg.v1r3.demo.main.cmd.tool.echo"}';
  const claims: Admission = {
    v: 1, kid: "k1", sub: "cg.v1r3.demo.main.cmd.tool.echo", agent_id: "planner", agent_turn_id: "turn-1", turn_epoch: 1,
    tool_call_id: "c1", tool_call_card_id: "5c102507-136d-5489-94b0-c10b0e3ef04b", tool_name: "echo", after_execution: "suspend",
    principal: "agent:planner", card_sha256: sha256Hex(content), iat: 1795741326000,
  };
  const signWith = (key = privateKey, c: Admission = claims) => {
    const payload = Buffer.from(JSON.stringify(c)).toString("base64url");
    return payload + "." + sign(null, Buffer.from(payload, "ascii"), key).toString("base64url");
  };
  const cmd: Command = {
    agent_id: "planner", agent_turn_id: "turn-1", turn_epoch: 1, tool_call_id: "c1", after_execution: "suspend",
    tool_call_card_id: "5c102507-136d-5489-94b0-c10b0e3ef04b", tool_name: "echo",
  };
  const verify = (hdr: string | undefined, c: Command = cmd, sub = claims.sub, card = content) => {
    const d = decodeAdmission(hdr);
    verifySignature(publicKeyFromRaw(pubRaw), d.payload, d.sig, d.claims.kid);
    matchAdmission(d.claims, sub, c);
    checkCard(d.claims, card);
  };
  it("accepts the mesh's signature", () => verify(signWith()));
  const refused: [string, () => void, RegExp][] = [
    ["no header", () => verify(undefined), /has no CG-Admission header/],
    ["no dot", () => verify("abc"), /not <claims>.<signature>/],
    ["another key", () => verify(signWith(generateKeyPairSync("ed25519").privateKey)), /does not verify/],
    ["changed claims", () => {
      const [, sig] = signWith().split(".");
      verify(Buffer.from(JSON.stringify({ ...claims, tool_call_id: "c2" })).toString("base64url") + "." + sig, { ...cmd, tool_call_id: "c2" });
    }, /does not verify/],
    ["another call", () => verify(signWith(), { ...cmd, tool_call_id: "c2" }), /tool_call_id "c2" differs/],
    ["another subject", () => verify(signWith(), cmd, "cg.v1r3.demo.main.cmd.tool.other"), /subject/],
    ["another epoch", () => verify(signWith(), { ...cmd, turn_epoch: 2 }), /turn_epoch 2 differs/],
    ["another card", () => verify(signWith(), cmd, claims.sub, content.replace("hello", "HELLO")), /content .* is not the admitted one/],
    ["re-serialized card", () => verify(signWith(), cmd, claims.sub, JSON.stringify(JSON.parse(content), null, 1)), /not the admitted one/],
  ];
  for (const [name, f, re] of refused) it(`refuses ${name}`, () => assert.throws(f, (e: Error & { code?: string }) => e.code === "not_admitted" && re.test(e.message)));
});

describe("parseCommand", () => {
  const s = subj.parseCommand("cg.v1r3.demo.main.cmd.tool.echo");
  const ok = { agent_id: "a", agent_turn_id: "t", turn_epoch: 1, tool_call_id: "c", after_execution: "suspend", tool_call_card_id: "5c102507-136d-5489-94b0-c10b0e3ef04b" };
  const enc = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));
  it("reads a good command, headers agreeing", () => {
    const h = headers();
    h.set("CG-Turn-Epoch", "1");
    const p = parseCommand(enc(ok), h, s, "echo");
    assert.ok(p.ok);
  });
  const cases: { name: string; body: unknown; hdr?: Record<string, string>; dead?: string; bad?: RegExp }[] = [
    { name: "not an object", body: [1], dead: "(body)" },
    { name: "no agent_id", body: { ...ok, agent_id: undefined }, dead: "agent_id" },
    { name: "agent_id not a token", body: { ...ok, agent_id: "a b" }, dead: "agent_id" },
    { name: "turn header disagrees", body: ok, hdr: { "CG-Turn-Id": "t2" }, dead: "agent_turn_id" },
    { name: "negative epoch", body: { ...ok, turn_epoch: -1 }, dead: "turn_epoch" },
    { name: "inline arguments", body: { ...ok, arguments: null }, bad: /inline arguments is not allowed/ },
    { name: "bad after_execution", body: { ...ok, after_execution: "pause" }, bad: /"pause" is not suspend or terminate/ },
    { name: "no card id", body: { ...ok, tool_call_card_id: undefined }, bad: /tool_call_card_id: is required/ },
    { name: "another tool", body: { ...ok, tool_name: "other" }, bad: /not the tool served/ },
    { name: "project header", body: ok, hdr: { "CG-Project-Id": "x" }, bad: /CG-Project-Id/ },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const h = headers();
      for (const [k, v] of Object.entries(c.hdr ?? {})) h.set(k, v);
      const p = parseCommand(enc(c.body), h, s, "echo");
      assert.ok(!p.ok);
      if (c.dead) assert.ok(!p.routable && p.field === c.dead, JSON.stringify(p));
      else assert.ok(p.routable && c.bad!.test(p.reason), JSON.stringify(p));
    });
  }
});

describe("arguments", () => {
  it("applies defaults and fixed values, then validates", () => {
    const v = compileSchema({ type: "object", properties: { n: { type: "integer", minimum: 0 }, m: { type: "string" } }, required: ["n"] });
    const args = applyArgs({ m: "x" }, { args: { defaults: { n: 1 }, fixed: { m: "y" } } });
    assert.deepEqual(args, { m: "y", n: 1 });
    assert.equal(checkArgs(v, args), undefined);
    assert.match(checkArgs(v, { n: "1" }) ?? "", /^registry: invalid arguments: arguments\/n: must be integer/);
    assert.match(checkArgs(v, { n: -1, m: 2 }) ?? "", /\(and 1 more violation\)/);
  });
  it("refuses other drafts, naming what to write", () => {
    assert.throws(() => compileSchema({ $schema: "http://json-schema.org/draft-04/schema#", type: "object" }), /not draft 2020-12/);
    compileSchema({ $schema: "http://json-schema.org/draft-07/schema#", type: "object" });
  });
  it("takes __cg_control's after_execution", () => {
    assert.equal(effectiveAfterExecution({ status: "success", after_execution: "suspend", result: { __cg_control: { after_execution: "terminate" } } }), "terminate");
    assert.equal(effectiveAfterExecution({ status: "success", after_execution: "suspend", result: { __cg_control: { after_execution: "x" } } }), "suspend");
  });
});

describe("serve", () => {
  // Checked before any I/O: a connection is not even touched.
  const nc = {} as NatsConnection;
  const handler = () => null;
  const cases: [string, Parameters<typeof serve>[0], RegExp][] = [
    ["no tools", { nc, tools: [], projects: ["demo"] }, /tools is empty/],
    ["no projects", { nc, tools: [{ name: "t", parameters: {}, handler }], projects: [] }, /projects is empty: name the projects/],
    ["a built-in's name", { nc, tools: [{ name: "List_Tools", parameters: {}, handler }], projects: ["demo"] }, /is a built-in's/],
    ["a bad name", { nc, tools: [{ name: "x y", parameters: {}, handler }], projects: ["demo"] }, /tool name "x y": use 1–128 characters/],
    ["a bad target", { nc, tools: [{ name: "t", target: "a..b", parameters: {}, handler }], projects: ["demo"] }, /target "" is not a subject token/],
    ["an old draft", { nc, tools: [{ name: "t", parameters: { $schema: "http://json-schema.org/draft-04/schema#" }, handler }], projects: ["demo"] }, /tool t: parameters: .* is not draft 2020-12/],
    ["a bad project", { nc, tools: [{ name: "t", parameters: {}, handler }], projects: ["de mo"] }, /project "de mo" is not a subject token/],
  ];
  for (const [name, o, re] of cases) {
    it(`refuses ${name}, naming it`, () => assert.rejects(serve(o), (e: Error & { code?: string }) => e.code === "invalid" && re.test(e.message)));
  }
});

describe("state events and the residual set", () => {
  it("builds state-event subjects as the Go SDK does (subjects.StateEvent, StateEventPattern)", () => {
    const id = "0194f0c2-7d3e-7b1a-9e2f-3a4b5c6d7e8f";
    assert.equal(subj.stateEvent("demo", "atp", id), `cg.v1r3.demo.state.evt.tool.atp.state.${id}`);
    assert.equal(subj.stateEventPattern("demo", "*", "*"), "cg.v1r3.demo.state.evt.tool.*.state.*");
    assert.equal(subj.stateEventPattern("demo", "artifact.put", id), `cg.v1r3.demo.state.evt.tool.artifact_put_25d0e43c.state.${id}`);
    const bad: [string, string, RegExp][] = [["de.mo", "b", /project_id "de.mo"/], ["demo", "a.b", /resource_id "a.b"/], ["demo", "", /resource_id ""/]];
    for (const [project, resource, re] of bad) {
      assert.throws(() => subj.stateEvent(project, "atp", resource), re);
      assert.throws(() => subj.stateEventPattern(project, "atp", resource), re);
    }
    assert.throws(() => subj.stateEvent("demo", "atp", "*"), /resource_id "\*"/, "a subject names one resource");
  });
  it("decodes a state event and refuses what is not one, naming what it needs", () => {
    const ev = decodeStateEvent(JSON.stringify({ type: "state_transition", service: "atp", project_id: "demo", resource_id: "b1",
      old_state: "PRE_JOURNEY", new_state: "JOURNEY", event_id: "b1/9", actor: "agent:ops", time: "2026-11-27T00:00:00Z", detail: { reason: "r" } }));
    assert.equal(ev.new_state, "JOURNEY");
    assert.deepEqual(ev.detail, { reason: "r" });
    assert.throws(() => decodeStateEvent("{"), (e: UtpmeshError) => e.code === "bad_reply" && /not JSON/.test(e.message));
    assert.throws(() => decodeStateEvent(JSON.stringify({ type: "state_transition", service: "atp", resource_id: "b1" })),
      (e: UtpmeshError) => e.code === "bad_reply" && /needs type "state_transition", service, resource_id and new_state/.test(e.message));
  });
  it("reads the residual set as Go's authz.Residual.Allows does", () => {
    const r = {
      template_version: "atp/1.0", project_id: "demo", agent_id: "a", booking_object_id: null, booking_state: "JOURNEY", hem_ids: ["HEM-MANDATE-01"],
      not_permitted: ["atp_update_pre_arrangement"], context_block: "",
      permitted: [
        { tool_name: "atp_get_booking_status", action: 'ATPAction::"get_booking_status"', conditional: false },
        { tool_name: "atp_invoke_hem", action: 'ATPAction::"invoke_hem"', conditional: true, hem_ids: ["HEM-MANDATE-01"] },
        { tool_name: "echo", action: 'Action::"echo"', conditional: true, conditions: ['p0: permit(...) when { context.x };'] },
      ],
    };
    const cases: [string, string, boolean][] = [
      ["atp_get_booking_status", "", true],
      ["atp_invoke_hem", "HEM-MANDATE-01", true],
      ["atp_invoke_hem", "HEM-OTHER", false],
      ["atp_invoke_hem", "", false],
      ["echo", "", false],
      ["atp_update_pre_arrangement", "", false],
    ];
    for (const [tool, hem, want] of cases) assert.equal(residualAllows(r, tool, hem), want, `${tool} ${hem}`);
    assert.equal(residualAllows(undefined, "echo"), false);
  });
  const residual = (state: string) => ({
    template_version: "utpmesh/1.0", project_id: "demo", agent_id: "a", booking_object_id: null, booking_state: state, hem_ids: [],
    not_permitted: [], context_block: "- echo", permitted: [{ tool_name: "echo", action: 'Action::"echo"', conditional: false }],
  });
  it("refuses a loop without an agent or turn, a call before any query, and a call after a failed query", async () => {
    assert.throws(() => new WindleyLoop({} as WindleyLoopConfig), /agent is required/);
    const agent = AgentClient.create({ nc: {} as NatsConnection, project: "demo", agentId: "a" });
    assert.throws(() => new WindleyLoop({ agent, agentTurnId: "" }), /agentTurnId is required/);
    const loop = new WindleyLoop({ agent, agentTurnId: "t" });
    // No residual yet: nothing is permitted, and nothing touches the connection.
    await assert.rejects(loop.call({ toolName: "echo", agentTurnId: "t" }),
      (e: UtpmeshError) => e.code === "not_permitted" && /echo is not permitted .*booking state unknown.*nothing was dispatched/.test(e.message));
    await assert.rejects(loop.newMandate(" "), /needs the new mandate's token/);
    // A query that fails leaves no residual: nothing is permitted until one succeeds.
    let answer: () => Promise<unknown> = async () => ({ result: { status: "success", after_execution: "suspend", result: residual("JOURNEY") } });
    const fake = { call: () => answer() } as unknown as AgentClient;
    const l2 = new WindleyLoop({ agent: fake, agentTurnId: "t" });
    await l2.start("PRE_JOURNEY");
    assert.ok(l2.permits("echo"));
    answer = async () => ({ result: { status: "failed", after_execution: "suspend", error: { code: "upstream_unavailable", message: "policy store down" } } });
    await assert.rejects(l2.bookingState("JOURNEY"), (e: UtpmeshError) => e.code === "upstream_unavailable" && /mandate_query: failed: policy store down/.test(e.message));
    assert.equal(l2.residual, undefined);
    await assert.rejects(l2.call({ toolName: "echo", agentTurnId: "t" }),
      (e: UtpmeshError) => e.code === "not_permitted" && /no residual set, the last mandate_query \(booking state JOURNEY\) failed: .*policy store down/.test(e.message));
    // The same state again re-queries (the failed one is not queried).
    answer = async () => ({ result: { status: "success", after_execution: "suspend", result: residual("JOURNEY") } });
    assert.equal((await l2.bookingState("JOURNEY")).requeried, true);
    assert.equal(l2.queries, 3);
    assert.ok(l2.permits("echo"));
    assert.equal(resultCallId("call-1"), "call-1.hem-result");
  });
});

describe("request errors", () => {
  it("tells a NATS permission refusal (permission_denied) from a timeout and no responders", () => {
    const pv = new natsErrors.PermissionViolationError("Permissions Violation for Publish to \"x\"", "publish", "x");
    const e = requestError("cg.v1r3.demo.default.svc.inbox.list.bob", 10, pv);
    assert.equal(e.code, "permission_denied");
    assert.match(e.message, /svc\.inbox\.list\.bob: this identity may not publish it/);
    assert.equal(requestError("s", 10, new natsErrors.TimeoutError()).code, "timeout");
    assert.equal(requestError("s", 10, new natsErrors.NoRespondersError("s")).code, "unavailable");
  });
});

describe("a wakeup's result card", () => {
  it("is taken only when it is the named tool.result card of the project and the call", () => {
    const card = {
      card_id: "0b1c2d3e-4f50-4a6b-8c7d-8e9fa0b1c2d3", project_id: "demo", type: "tool.result", author_id: "echo",
      tool_call_id: "c1", created_at: "2026-11-27T09:00:00Z", content: { status: "success", after_execution: "suspend", result: { x: 1 } },
      metadata: { agent_id: "a1", agent_turn_id: "t1" },
    } as unknown as Card;
    const w = { tool_result_card_id: card.card_id, result_card: card } as unknown as Wakeup;
    const got = carriedResult(w, "demo", "t1", "c1");
    assert.equal(got?.card.card_id, card.card_id);
    assert.equal(got?.result.status, "success");
    assert.equal(carriedResult({ ...w, result_card: undefined }, "demo", "t1", "c1"), undefined);
    assert.equal(carriedResult({ ...w, tool_result_card_id: "other" }, "demo", "t1", "c1"), undefined);
    assert.equal(carriedResult(w, "other", "t1", "c1"), undefined);
    assert.equal(carriedResult(w, "demo", "t2", "c1"), undefined);
    assert.equal(carriedResult(w, "demo", "t1", "c2"), undefined);
    assert.equal(carriedResult({ ...w, result_card: { ...card, type: "tool.call" } as Card }, "demo", "t1", "c1"), undefined);
  });
});
