// Package agent is what a Go agent runtime uses to call tools over the
// mesh with the UTP tool protocol: dispatch the call through the mesh's
// admission (which writes the tool.call card and publishes the command),
// and get the result back through the inbox —
// either waiting for it (Call) or parking the turn and resuming it when
// the wakeup comes (Dispatch, Wakeups, Resume).
//
//	c, err := agent.New(nc, agent.Config{Project: "demo", Channel: "default", AgentID: "researcher"})
//	out, err := c.Call(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: turn, Arguments: args})
//	// out.Result.Status, out.Result.Result, out.AfterExecution
//
// An operator's client (Config.Operator) makes its calls on
// svc.dispatch.operator.<name> with no mandate, as the agent id
// op-<name> (utp.OperatorAgentID); it waits for them and acks their
// inbox entries like any Call.
//
// StateEvents follows the state transitions of a resource of the
// project (an ATP booking; docs/protocol.md §10.4), so a runtime re-runs
// its Windley query when a resource it is bound to changes state, not on
// a timer.
//
// A Client needs a CardStore, a tool registry and an inbox client; New
// creates the NATS clients of the mesh services for those Config leaves
// nil, with the same version and channel: the CardStore and the inbox on
// the agent's own subjects (natsstore.NewAgentClient,
// natsinbox.NewAgentClient: cg.<ver>.<project>.<channel>.svc.cardstore.<op>.<agent_id>
// and …svc.inbox.<op>.<agent_id>), which serve that agent's cards, turns
// and inbox entries only and are the only ones a per-agent identity
// (agent-<project>.<agent>.nk) may use; the registry with natsreg.
//
// # Message flow
//
// One tool call, message by message, as Call runs it. By default steps 1,
// 2 and 4 are the mesh's: Call subscribes (step 3), then sends one
// request on cg.<ver>.<project>.<channel>.svc.dispatch.call.<agent_id>
// (utp.DispatchRequest, with the mandate) and the mesh's admission service
// looks the tool up, authorizes the call, writes the card (without the
// mandate: metadata mandate_jti, mandate_sha256, admission) and publishes
// the command with a CG-Admission header (docs/protocol.md §5.7). A
// refused call gets a failed auth_failed result the same way as any other.
// With Config.RawCommands (a raw-mode project) the client does steps 1, 2
// and 4 itself, the mandate in the card's metadata.mandate:
//
//  1. Registry. The tool is looked up in the client's project (registry
//     "get", cached for Config.RegistryCacheTTL, default 5s: the registry
//     announces no changes, so a re-registration is seen at most that much
//     later); a missing tool is ErrUnknownTool (never cached) and nothing
//     is written. Its
//     target_subject template is rendered for the client's version,
//     project and channel, e.g. cg.v1r3.demo.default.cmd.tool.echo.
//  2. Card. The tool.call card is written to the CardStore: content
//     {tool_name, arguments, target_subject}; tool_call_id; author_id the
//     agent; metadata agent_id, agent_turn_id, turn_epoch, step_id,
//     tool_call_id, trace_id (from the traceparent), parent_step_id, role
//     "assistant". The write is durable before the command leaves.
//  3. Subscription. Call makes sure the client's wakeup subscription on
//     cg.<ver>.<project>.<channel>.cmd.agent.<agent_id>.wakeup exists and
//     is known to the server (one subscription per Client, flushed once),
//     and registers the call under (agent_turn_id, tool_call_id) — all
//     before the command is published.
//  4. Command. The command is published with JetStream on the target
//     subject and Call waits for the PubAck. Body (utp.Command): agent_id,
//     agent_turn_id, turn_epoch, tool_call_id, after_execution (the
//     request's override, else the registry entry's), tool_call_card_id,
//     step_id, tool_name, dispatch_requested_at. The arguments are never
//     inline: the worker reads them from the card. The headers are listed
//     under "Command headers" below.
//  5. Worker. A tool service consumes the command, runs the tool, writes
//     the tool.result card and reports it to the inbox: as a request on
//     cg.<ver>.<project>.<channel>.svc.inbox.report, or with JetStream on
//     cg.<ver>.<project>.<channel>.cmd.sys.inbox.report when the request is
//     not answered (not this package's doing; see package worker).
//  6. Inbox. The inbox stores one entry per (project, agent_turn_id,
//     tool_call_id) and publishes a utp.Wakeup with JetStream on the
//     agent's wakeup subject (stream cg_wake_<ver>, Nats-Msg-Id
//     wakeup-<inbox_id>, the traceparent passed through).
//  7. Wakeup. Call's subscription receives it and hands it to the waiting
//     call whose (agent_turn_id, tool_call_id) match. Right after
//     publishing (only when the caller chose the tool_call_id: a re-made
//     call may have its result already), and then every
//     Config.PollInterval while waiting, Call also reads the inbox's
//     pending entries of the turn: a result that was already there or
//     whose wakeup core NATS lost (a reconnect) is found that way. The inbox, not the wakeup, is the
//     truth, so no result can be missed as long as the inbox keeps it.
//  8. Result. Call reads the tool.result card the wakeup points at
//     (tool_result_card_id, CardStore "get" on the agent's subject),
//     checks that it belongs to the call, and acknowledges the inbox
//     entry lazily (inbox "ack" on the agent's subject, with "lazy": the
//     inbox answers at once, shows the entry acked to every read, and
//     writes the ack with its next transaction; a crash before that
//     leaves the entry pending, so Resume sees the result once more).
//     Call sends that ack without waiting for the answer; Resume waits
//     for the client's acks in flight, and Close for all of them.
//     Client.Ack stays durable. Outcome.AfterExecution
//     is the effective value: result.__cg_control.after_execution when
//     present and valid, else the card's after_execution.
//
// # Command headers
//
// The command (published by the admission service, or by a RawCommands
// client) carries, besides its JSON body (and, from the admission,
// CG-Admission and CG-Mandate):
//
//	traceparent       the request's, else the context's (ContextWithTraceparent), else a new one
//	Nats-Msg-Id       utp.CallRef.MsgID(): "cmd-" + hex SHA-256 of the length-prefixed
//	                  (project_id, agent_turn_id, tool_call_id); JetStream drops a re-publish
//	                  of the same call within 2 min, never another call's command
//	CG-Project-Id     the project
//	CG-Channel-Id     the channel
//	CG-Agent-Id       agent_id
//	CG-Turn-Id        agent_turn_id
//	CG-Turn-Epoch     turn_epoch (decimal)
//	CG-Tool-Call-Id   tool_call_id
//	CG-Step-Id        step_id
//	CG-Msg-Type       "tool_call"
//	CG-Version        the protocol version token
//	CG-Sender         agent_id
//	CG-Timestamp      RFC 3339, UTC, nanoseconds
//
// The CG-* identity headers repeat body fields (CommonGround v1r4 runtimes
// read only them); the worker refuses a command where the two disagree.
//
// A tool that fails is not an error of Call: the Outcome's Result has a
// status other than success and an Error. When ctx ends before the result
// arrives Call returns a *PendingError (errors.Is(err,
// context.DeadlineExceeded) holds) naming the call; the call is not
// canceled — its result reaches the inbox later and Resume finds it.
//
// # Suspend and resume
//
// A runtime that parks a turn instead of blocking uses three calls:
//
//   - Dispatch does steps 1–4 and returns a Pending (tool_call_id,
//     tool_call_card_id, step_id, agent_turn_id…) to keep with the turn.
//   - Wakeups consumes the agent's wakeups with a JetStream durable pull
//     consumer on the wakeup stream (cg_wake_<ver>). The handler runs once
//     per delivery; the wakeup is acknowledged when it returns nil and
//     redelivered after a delay when it returns an error or panics.
//     Wakeups published while no consumer ran wait in the stream and are
//     delivered when it runs again. With NATS authentication on, the mesh
//     makes each agent identity's durable and the identity may only bind
//     it: agent-<project>.<agent>.nk binds DurableName()
//     (agent_<agent_id>_<hash>, the agent's wakeups in every channel of
//     the project), the default; agent-<project>.nk binds the project's
//     (project_<project>_<hash>, every agent's wakeups of the project,
//     told apart by Wakeup.AgentID) with WithProjectWakeups
//     (ExampleClient_Dispatch, run against a real up by cmd/utpmesh
//     TestAgentExampleAgainstUp). Another durable (WithDurable) is
//     created when missing, which only admin may; a durable the identity
//     may not use is ErrNoDurable, saying which it may.
//   - Resume reads the turn's cards (cardstore.AllTurn) and the inbox's
//     entries of the turn and sorts the turn's tool calls into Outstanding
//     (a tool.call, no tool.result yet), Unconsumed (a tool.result whose
//     inbox entry is pending — or not stored yet) and Finished (entry
//     acknowledged or stale). A handler typically calls Resume for the
//     wakeup's turn, feeds the unconsumed results to the model, and Acks
//     their entries.
//
// Ack and SetEpoch pass through to the inbox for the client's project.
//
// # Caveats
//
//   - Wakeups are at least once. JetStream redelivers what was not
//     acknowledged; the inbox may publish a wakeup twice after a crash; a
//     Call and a Wakeups consumer of the same agent both see every
//     wakeup; a durable consumer created for the first time replays the
//     wakeups of its filter still in the stream (24 h). Deduplicate by
//     (agent_turn_id, tool_call_id), the seed's callback anchor, or let
//     WithSkipConsumed drop wakeups whose entry is no longer pending.
//   - The inbox entry, not the wakeup, is the state: Ack is what marks a
//     result consumed, and acking twice is harmless.
//   - Epochs. The inbox keeps each turn's epoch, raised only by SetEpoch
//     (a report never moves it). After a restart, call SetEpoch with the
//     new epoch and dispatch with it:
//     results of older epochs then arrive stale and wake no one, and the
//     turn's pending entries of older epochs turn stale. A Call made with
//     a new tool_call_id at an epoch older than the turn's waits
//     until its ctx ends (its result is stale and wakes no one).
//   - Re-using a tool_call_id is idempotent: the worker answers with the
//     existing result, and Call finds the call's inbox entry in any state
//     (pending, acked, or stale because it was reported at the epoch
//     before a restart), at once or at its next poll (PollInterval).
//   - Nats-Msg-Id is de-duplicated per stream, and the command stream
//     spans every project and channel of the version: the id hashes the
//     length-prefixed (project, turn, call), so two different calls never
//     share one (the old "cmd-<project>-<turn>-<call>" did: turn "t-1" +
//     call "2" was turn "t" + call "1-2", and the second command was
//     dropped as a duplicate).
//   - Call without a deadline waits as long as the tool runs (the tool's
//     own timeout bounds that: the worker then reports status timeout).
//   - The Client's core NATS subscription is per process: a wakeup for a
//     Call made by another process of the same agent is ignored here.
package agent
