// Package turn inspects and replays agent turns from the CardStore: the
// logic behind `utpmesh turns show|replay|resume`, for Go users too.
//
// # Reconstructing a turn
//
// Load reads every card of a turn (cardstore.AllTurn, in write order) and
// pairs each tool.call card with the tool.result card of the same
// tool_call_id. Calls are ordered by the write position of their first
// card; cards that belong to no call (thoughts, instructions,
// deliverables) are kept in Others with their positions, so a timeline can
// interleave them. For each call Load reports status (or "pending"), the
// effective after_execution (the result's __cg_control override, else the
// recorded value), the epochs of call and result, step ids, the duration
// (result created_at − call created_at, so two clocks: the agent's and the
// worker's) and the structured error of a failed call. What does not add
// up — a result without a call, a second result, unreadable content — goes
// to Turn.Problems instead of failing the load. WriteTimeline renders a
// turn for people; the Turn itself marshals to JSON.
//
// The cost of Load is the cost of reading the turn: the CardStore indexes
// cards by turn, so it does not grow with the size of the store (see
// BenchmarkTurnShow and docs/performance.md).
//
// # Resuming
//
// Resume is a thin layer over agent.Client.Resume, which computes which
// calls are outstanding (no result yet), unconsumed (a result the agent
// has not acknowledged) and finished; Resume flattens that into a
// ResumeReport grouped by step_id, which prints and serializes.
//
// # Replaying
//
// Replay re-executes the calls of a turn against the workers running now,
// through agent.Client.Call, under a new agent_turn_id, and diffs each new
// outcome with the recorded one. The original cards are never touched.
// Each new tool.call card keeps the original tool_call_id, arguments,
// step ids, created_at and mandate, so a deterministic tool reproduces its
// result exactly; Diff (a structural JSON diff that names JSON-pointer
// paths) says where a non-deterministic one differs. Status,
// after_execution and error code are compared along with the result.
//
// Caveats:
//
//   - Replay really runs the tools. A tool with side effects (a booking,
//     an e-mail) performs them again: use PlanReplay (--dry-run) first.
//   - The calls are made as the client's agent. A tool or policy that
//     depends on the agent id sees that id, not the original one.
//   - The command's after_execution is not recorded on the tool.call card,
//     so replayed calls use the registry's current default; a turn whose
//     calls overrode it shows an after_execution change.
//   - The inbox makes reports of an epoch older than the turn's highest
//     stale, so a call is never replayed at an epoch lower than a call
//     before it, and calls of different epochs never run concurrently.
//   - A call whose tool.call card is missing cannot be replayed (its
//     arguments are unknown); the plan lists it as skipped.
package turn
