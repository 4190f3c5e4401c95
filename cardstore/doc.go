// Package cardstore defines the CardStore: the mesh's source of truth for
// cards (immutable facts), boxes (ordered lists of card ids) and claims
// (leases that make tool execution exactly-once).
//
// The Store interface is implemented twice:
//
//   - cardstore/boltstore keeps everything in one bbolt file, with group
//     commit: concurrent writers share one fsync'd transaction.
//   - cardstore/natsstore serves a Store over core NATS request-reply on
//     "svc" subjects (cg.<ver>.<project>.<channel>.svc.cardstore.<op>) and
//     provides a client that implements Store against such a server.
//
// Code that uses a Store cannot tell the two apart; cardstore/storetest is
// the one conformance suite both run.
//
// # Rules every implementation keeps
//
//   - Durability: a write method that returns nil has reached disk. One
//     exception: a store may keep a call's claim (a CallKey) of a short
//     lease in memory until its next commit, if it makes up for a claim
//     a crash loses (boltstore: a lock-delay after the restart and the
//     result fence; see its "Call claims").
//   - Immutability: a card id, once written, always names the same bytes.
//     A repeated put with identical canonical bytes (card.Encode) succeeds
//     and changes nothing; different bytes fail with ErrConflict.
//   - One result per call: at most one tool.result card per (project,
//     agent_turn_id, tool_call_id). A second, different one fails with
//     ErrResultExists; FindToolResult returns the first.
//   - Project isolation: every read and write names a project, and a card,
//     box or claim of another project does not exist for it.
//   - Atomicity: Put stores all its cards or none.
//
// # Claims
//
// A claim is a compare-and-set lease on a key within a project (see
// ClaimRequest). Lease expiry is judged by the store's clock, never the
// claimant's, so workers on machines with skewed clocks agree. The fencing
// Token grows on every take-over; a worker that sees its token superseded
// must stop side effects. Claims are a mutual-exclusion aid, not the final
// guard: the one-result-per-call rule above is what guarantees a call ends
// with exactly one tool.result even if a paused worker wakes up after its
// lease was taken over.
//
// # Is a call running?
//
// A client tells what became of (agent_turn_id, tool_call_id) without
// taking the worker's claim, with two reads:
//
//  1. FindToolResult(project, turn, call) returns the tool.result card:
//     the call is done (its status says how).
//  2. Otherwise GetClaim(project, CallKey{turn, call}.String()): a claim that is
//     not Expired means a worker is running the call now (Holder names the
//     worker instance, ExpiresAt is when its lease lapses unless renewed).
//     An Expired claim means the worker that had it stopped renewing (it
//     died or stalled); JetStream redelivers the command and another
//     worker takes the claim over.
//  3. Otherwise (ErrNotFound) no worker has the call: it was not
//     dispatched, or its command waits for a worker.
//
// Read the result first: storing a call's tool.result ends its claim in
// the same write, but a claim taken by another party afterwards (a
// renewal racing the result, a cancel) can still be live for a call that
// has a result, and that does not mean the call is still running.
// Claims are also taken by other parties that need the call to stand
// still (pmo's cancel_tool_call holds it while it writes a canceled
// result); Holder tells them apart.
//
// GetClaim only reads: it never creates, renews or takes over a claim.
//
// # Call keys
//
// A tool call's claim key is CallKey{AgentTurnID, ToolCallID}.String():
// "toolcall/<agent_turn_id>/<tool_call_id>" with '%' and '/' in the
// agent_turn_id written "%25" and "%2F" (ids without them are written
// as they are). ParseCallKey reads one back; every key names at most one
// call, so the tool-scoped checks (CheckKeyCallsTool) read one call.
//
// # The rules every backend shares
//
// Backends (boltstore, jsstore) keep only the storing. What a request
// may ask and how it is decided lives here, once: the argument checks
// (validate.go, Check*), Put's per-card rules (PreparePut), the claim
// decisions on a key's ClaimRecord (NextClaim, CheckReleasable, ClaimOf,
// CheckResultFence), the box rules (CheckCreateBox, NewBox, AppendToBox)
// and the turn summary (TurnSummary, PageLimit). storetest checks that
// every backend applies them alike.
//
// # Listing turns
//
// ListTurns pages through a project's turns newest first, by the store
// position of each turn's first card (see ListTurnsRequest), with a
// summary of each (TurnInfo: agent, first and last card times, card
// counts). Pass a page's Next as the following request's Before.
//
// # Caveats
//
//   - ListTurn orders cards by the store's write sequence, not created_at.
//     Cards put in one call keep their order within the call.
//   - Limits (MaxBatch, MaxPage, MaxBoxCards, card size) keep every request
//     and reply small enough for one NATS message; hitting one is an
//     ErrTooLarge error, never a truncated answer.
//   - Boxes are the only mutable objects; a box only grows.
package cardstore
