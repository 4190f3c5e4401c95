// ATP's Windley loop and per-agent identities against a real mesh:
// cmd/utpmesh's TestTypeScriptSDK starts `utpmesh up` (which serves ATP),
// prepares what these tests need and runs them with:
//
//   NATS_URL                  the mesh
//   UTPMESH_TS_DATA           its data directory (creds/, demo-mandate.jwt)
//   UTPMESH_TS_BOOKING        a fresh booking in PRE_JOURNEY
//   UTPMESH_TS_LOOP_MANDATE   a mandate of agent ts-loop bound to it: get_booking_status, and
//                             update_pre_arrangement when booking_state is PRE_JOURNEY
//   UTPMESH_TS_ALICE_MANDATE  a mandate of agent ts-alice for echo; her identity is
//                             creds/agent-demo.ts-alice.nk (utpmesh identity add agent demo/ts-alice)
//   UTPMESH_TS_GAP_BOOKING    another fresh booking in PRE_JOURNEY
//   UTPMESH_TS_GAP_MANDATE    demo-agent's mandate narrowed from the demo mandate, bound to it,
//                             without update_pre_arrangement, with invoke_hem for HEM-MANDATE-01
//   UTPMESH_TS_CLI, _CLI_DIR  the utpmesh CLI (run with UTPMESH_TEST_EXEC=1) and the directory to run it in
//
// Without them the tests skip.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import type { NatsConnection } from "@nats-io/transport-node";

import {
  AgentClient, HEM_MANDATE_GAP, TOOL_INVOKE_HEM, UtpmeshError, WindleyLoop, connectMesh, invokeHemArguments, newMandateGap, resultCallId, subjects,
} from "../src/index.js";
import type { Requery, StateEvent, Wakeup } from "../src/index.js";
import { request } from "../src/svc.js";

const data = process.env.UTPMESH_TS_DATA;
const booking = process.env.UTPMESH_TS_BOOKING ?? "";
const skip = data && booking ? false : "needs a mesh: run cmd/utpmesh TestTypeScriptSDK (go test -run TestTypeScriptSDK ./cmd/utpmesh)";
const creds = (name: string) => join(data ?? "", "creds", name + ".nk");
const read = (path: string) => readFileSync(path, "utf8").trim();
const run = Date.now().toString(36);
const turn = (name: string) => `ts-${name}-${run}`;
// utpmesh runs the CLI (the Go test binary acting as utpmesh) in the mesh's directory, as the operator for `hem`.
const utpmesh = (...args: string[]) => execFileSync(process.env.UTPMESH_TS_CLI!, args,
  { cwd: process.env.UTPMESH_TS_CLI_DIR, env: { ...process.env, UTPMESH_TEST_EXEC: "1" }, encoding: "utf8" });

describe("ATP's Windley loop against a mesh", { skip }, () => {
  let nc: NatsConnection;
  let demo: AgentClient;
  let guest: AgentClient;
  before(async () => {
    nc = await connectMesh({ creds: creds("agent-demo"), name: "ts-loops-test" });
    demo = AgentClient.create({ nc, project: "demo", agentId: "demo-agent", mandate: read(join(data!, "demo-mandate.jwt")) });
    guest = AgentClient.create({ nc, project: "demo", agentId: "ts-loop", mandate: read(process.env.UTPMESH_TS_LOOP_MANDATE!) });
  });
  after(async () => {
    await demo?.close();
    await guest?.close();
    await nc?.drain();
  });

  it("re-queries on a transition by another actor and calls no tool the new residual forbids", async () => {
    const t = turn("loop");
    const loop = new WindleyLoop({ agent: guest, agentTurnId: t });
    // Subscribe first, then the pre-session query (§10.4).
    const requeries: Requery[] = [];
    let requeried!: (r: Requery) => void;
    const first = new Promise<Requery>((r) => (requeried = r));
    const stop = await loop.follow(booking, (r) => {
      requeries.push(r);
      requeried(r);
    });
    try {
      const status = await guest.call({ toolName: "atp_get_booking_status", agentTurnId: t, arguments: { booking_object_id: booking } });
      assert.equal(status.result.status, "success", JSON.stringify(status.result));
      const state = (status.result.result as { state: string }).state;
      assert.equal(state, "PRE_JOURNEY");
      const pre = await loop.start(state);
      assert.equal(pre.booking_object_id, booking, "the mandate is bound to the booking");
      assert.equal(pre.booking_state, "PRE_JOURNEY");
      assert.ok(loop.permits("atp_update_pre_arrangement"), JSON.stringify(pre.permitted));
      assert.equal(loop.queries, 1);
      // The same state again queries nothing.
      assert.equal((await loop.bookingState("PRE_JOURNEY")).requeried, false);

      // Another actor (demo-agent, its own mandate) moves the booking.
      const moved = await demo.call({ toolName: "atp_booking_transition", agentTurnId: turn("ops"),
        arguments: { booking_object_id: booking, to: "JOURNEY", reason: "guests arrived" } });
      assert.equal(moved.result.status, "success", JSON.stringify(moved.result));

      // The state event, not a timer, re-ran the query.
      const r = await first;
      assert.equal(r.error, undefined, String(r.error));
      assert.equal(r.event.resource_id, booking);
      assert.equal(r.event.old_state, "PRE_JOURNEY");
      assert.equal(r.event.new_state, "JOURNEY");
      assert.equal(r.event.actor, "agent:demo-agent");
      assert.ok(r.event.event_id.startsWith(booking + "/"), r.event.event_id);
      assert.equal(r.residual?.booking_state, "JOURNEY");
      assert.equal(loop.events, 1);
      assert.equal(loop.queries, 2);
      assert.equal(requeries.length, 1);
      assert.equal(loop.residual?.booking_state, "JOURNEY");
      assert.equal(loop.permits("atp_update_pre_arrangement"), false, JSON.stringify(loop.residual?.permitted));

      // The tool the new residual forbids is refused, and nothing is dispatched.
      await assert.rejects(
        loop.call({ toolName: "atp_update_pre_arrangement", agentTurnId: t, toolCallId: `forbidden-${run}`,
          arguments: { booking_object_id: booking, participant_id: "p-aiko", field_key: "boot_size_eu", field_value: 38, source: "GUEST" } }),
        (e: UtpmeshError) => e.code === "not_permitted" && /atp_update_pre_arrangement is not permitted/.test(e.message) &&
          /booking state JOURNEY/.test(e.message) && /nothing was dispatched/.test(e.message));
      const st = await guest.resume(t);
      assert.deepEqual(st.calls.filter((c) => c.toolCallId === `forbidden-${run}`), [], "the forbidden call has no card");
      assert.equal(st.calls.filter((c) => c.toolName === "mandate_query").length, 2, "two queries in the turn: the pre-session one and the event's");

      // A permitted tool goes through the loop.
      const ok = await loop.call({ toolName: "atp_get_booking_status", agentTurnId: t, arguments: { booking_object_id: booking } });
      assert.equal((ok.result.result as { state: string }).state, "JOURNEY");
    } finally {
      stop();
    }
  });

  it("ends a mandate gap in a new mandate: escalation, an operator's approval, the sub-mandate re-queried, the call made", async () => {
    const b = process.env.UTPMESH_TS_GAP_BOOKING!;
    const t = turn("gap");
    const agent = AgentClient.create({ nc, project: "demo", agentId: "demo-agent", mandate: read(process.env.UTPMESH_TS_GAP_MANDATE!) });
    try {
      const loop = new WindleyLoop({ agent, agentTurnId: t });
      await loop.start("PRE_JOURNEY");
      assert.equal(loop.permits("atp_update_pre_arrangement"), false);
      assert.ok(loop.permits(TOOL_INVOKE_HEM, HEM_MANDATE_GAP));
      const update = { toolName: "atp_update_pre_arrangement", agentTurnId: t,
        arguments: { booking_object_id: b, participant_id: "p-aiko", field_key: "boot_size_eu", field_value: 38, source: "GUEST" } };
      await assert.rejects(loop.call(update), (e: UtpmeshError) => e.code === "not_permitted");
      const gap = newMandateGap(loop.residual, "atp_update_pre_arrangement", 'ATPAction::"update_pre_arrangement"', "",
        "the guests' boot sizes must be recorded before the lesson");
      assert.equal(gap.resource_condition, `resource == Booking::"${b}"`);
      assert.throws(() => newMandateGap(loop.residual, "atp_get_booking_status", 'ATPAction::"get_booking_status"', "", "x"), /is permitted: not a mandate gap/);

      const inv = await loop.call({ toolName: TOOL_INVOKE_HEM, agentTurnId: t, arguments: invokeHemArguments(gap) }, HEM_MANDATE_GAP);
      assert.equal(inv.result.status, "success", JSON.stringify(inv.result));
      const task = inv.result.result as { task_id: string; status: string };
      assert.equal(task.status, "PENDING");
      assert.equal(await loop.readResolution(inv.call.toolCallId), undefined, "not resolved before the operator decides");

      // The operator (operator.nk, `utpmesh hem`) sees the structured request and approves it with the parent mandate.
      let woke!: (w: Wakeup) => void;
      const resolution = new Promise<Wakeup>((r) => (woke = r));
      const stop = await agent.wakeups((w) => w.tool_call_id === resultCallId(inv.call.toolCallId) && woke(w));
      try {
        const list = JSON.parse(utpmesh("hem", "ls", "--status", "PENDING", "--json")) as { tasks: { task_id: string; human_confirmation_token: string; expansion?: { missing_action?: string } }[] };
        const pending = list.tasks.find((x) => x.task_id === task.task_id);
        assert.ok(pending, `task ${task.task_id} is not pending: ${JSON.stringify(list)}`);
        assert.equal(pending.expansion?.missing_action, 'ATPAction::"update_pre_arrangement"');
        utpmesh("hem", "confirm", task.task_id, "--token", pending.human_confirmation_token, "--parent-mandate", join(data!, "demo-mandate.jwt"));
        const w = await resolution;
        assert.equal(w.status, "success");
        assert.equal(await agent.ack([w.inbox_id]), 1);
      } finally {
        stop();
      }
      const res = await loop.readResolution(inv.call.toolCallId);
      assert.equal(res?.status, "COMPLETE", JSON.stringify(res));
      assert.equal(res?.confirmed_by, "operator");
      assert.equal(res?.operator, "operator");
      assert.ok(res?.mandate && res.mandate_jti, "the resolution carries the sub-mandate");

      const queries = loop.queries;
      await loop.resolved(res!);
      assert.equal(loop.queries, queries + 1, "the new mandate is queried at once");
      assert.equal(loop.mandate, res!.mandate);
      assert.equal(loop.residual?.mandate_jti, res!.mandate_jti);
      assert.ok(loop.permits("atp_update_pre_arrangement"), JSON.stringify(loop.residual?.permitted));
      const done = await loop.call(update);
      assert.equal(done.result.status, "success", JSON.stringify(done.result));
    } finally {
      await agent.close();
    }
  });

  it("delivers state events to a plain subscription, and refuses a bad resource id", async () => {
    // Every transition of the booking arrives on stateEvents("atp", id).
    let got!: (e: StateEvent) => void;
    const seen = new Promise<StateEvent>((r) => (got = r));
    const stop = await demo.stateEvents("atp", booking, got);
    try {
      const moved = await demo.call({ toolName: "atp_booking_transition", agentTurnId: turn("back"),
        arguments: { booking_object_id: booking, to: "COMPLETION", reason: "the week is over" } });
      assert.equal(moved.result.status, "success", JSON.stringify(moved.result));
      const ev = await seen;
      assert.deepEqual([ev.type, ev.service, ev.project_id, ev.old_state, ev.new_state], ["state_transition", "atp", "demo", "JOURNEY", "COMPLETION"]);
    } finally {
      stop();
    }
    await assert.rejects(demo.stateEvents("atp", "a.b", () => undefined),
      (e: UtpmeshError) => e.code === "invalid" && /resource_id "a.b"/.test(e.message));
  });
});

describe("a per-agent identity against a mesh", { skip }, () => {
  let anc: NatsConnection;
  let nc: NatsConnection;
  let alice: AgentClient;
  let demo: AgentClient;
  before(async () => {
    anc = await connectMesh({ creds: creds("agent-demo.ts-alice"), name: "ts-alice" });
    alice = AgentClient.create({ nc: anc, project: "demo", agentId: "ts-alice", mandate: read(process.env.UTPMESH_TS_ALICE_MANDATE!) });
    nc = await connectMesh({ creds: creds("agent-demo"), name: "ts-demo" });
    demo = AgentClient.create({ nc, project: "demo", agentId: "demo-agent", mandate: read(join(data!, "demo-mandate.jwt")) });
  });
  after(async () => {
    await alice?.close();
    await demo?.close();
    await anc?.drain();
    await nc?.drain();
  });

  it("calls, resumes and acks on its own agent-scoped subjects", async () => {
    const out = await alice.call({ toolName: "echo", agentTurnId: turn("alice"), arguments: { who: "alice" } });
    assert.equal(out.result.status, "success", JSON.stringify(out.result));
    assert.deepEqual(out.result.result, { who: "alice" });
    const st = await alice.resume(turn("alice"));
    assert.equal(st.finished.length, 1, JSON.stringify(st));
    assert.equal(st.finished[0].resultCard?.card_id, out.resultCard.card_id);
    assert.equal((await alice.findResult(turn("alice"), out.call.toolCallId))?.card.card_id, out.resultCard.card_id);
  });

  it("is refused another agent's inbox and cards", async () => {
    // demo-agent's call, its entry left pending.
    let woke!: (w: Wakeup) => void;
    const wakeup = new Promise<Wakeup>((r) => (woke = r));
    const stop = await demo.wakeups((w) => w.agent_turn_id === turn("theirs") && woke(w));
    let w: Wakeup;
    try {
      await demo.dispatch({ toolName: "echo", agentTurnId: turn("theirs"), arguments: {} });
      w = await wakeup;
    } finally {
      stop();
    }
    const s = subjects.scope("demo");
    // On her own subjects, naming demo-agent's entry, turn or card: the service refuses.
    const own: [string, string, Record<string, unknown>, string][] = [
      ["list demo-agent's entries", subjects.agentInbox(s, "list", "ts-alice"), { agent_id: "demo-agent", state: "all" }, "demo-agent"],
      ["ack demo-agent's entry", subjects.agentInbox(s, "ack", "ts-alice"), { inbox_ids: [w.inbox_id] }, w.inbox_id],
      ["get demo-agent's entry", subjects.agentInbox(s, "get", "ts-alice"), { inbox_id: w.inbox_id }, w.inbox_id],
      ["get demo-agent's result card", subjects.agentCardstore(s, "get", "ts-alice"), { card_id: w.tool_result_card_id }, ""],
    ];
    for (const [what, subject, body, names] of own) {
      await assert.rejects(request(anc, subject, body), (e: UtpmeshError) => e.code === "forbidden" && e.message.includes(names), what);
    }
    // On demo-agent's subjects: the server refuses her identity the publish.
    const asDemo = AgentClient.create({ nc: anc, project: "demo", agentId: "demo-agent" });
    try {
      await assert.rejects(asDemo.entries(), (e: UtpmeshError) => e.code === "permission_denied" && /svc\.inbox\.list\.demo-agent/.test(e.message) &&
        /may not publish/.test(e.message));
      await assert.rejects(asDemo.ack([w.inbox_id]), (e: UtpmeshError) => e.code === "permission_denied");
    } finally {
      await asDemo.close();
    }
    // Another project's state events: the server refuses the subscription.
    const elsewhere = AgentClient.create({ nc: anc, project: "other", agentId: "ts-alice" });
    await assert.rejects(elsewhere.stateEvents("atp", "*", () => undefined),
      (e: UtpmeshError) => e.code === "permission_denied" && /cg\.v1r3\.other\.state\.evt\.tool\.atp\.state\.\*/.test(e.message));
    await elsewhere.close();
    // demo-agent's entry is still pending: nothing of hers touched it.
    const pending = await demo.entries({ agentTurnId: turn("theirs") });
    assert.deepEqual(pending.map((e) => e.inbox_id), [w.inbox_id]);
    assert.equal(await demo.ack([w.inbox_id]), 1);
  });
});
