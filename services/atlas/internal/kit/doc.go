// Package kit is the machinery every ATLAS service shares, so that each
// group (tasks, notes, calendar, workflows, utility) is only its Specs. It
// builds on the catalogues' toolkit (services/toolkit): a Spec becomes a
// toolkit.Spec (target atlas.<group>.<NAME>, Cedar action
// ATLASAction::"<NAME>"), arguments bind with toolkit.Bind, the call
// records are toolkit.CallRecord (the receipt as the record's receipt) and
// the confirmation rule is toolkit.NeedsConfirm. What stays here is
// ATLAS's: its state, receipts, the confirmation endpoint and the holder
// lease.
//
// A Service owns its group's state (package state): the local bbolt file
// atlas-<group>.db, guarded by a holder lease in the CardStore (lease.go: services/state/holder),
// or the shared JetStream KV bucket atlas_<group>. Data is scoped by
// project: every bucket a tool touches belongs to the call's project, so
// one project never sees another's data.
//
// Every call of a Spec goes through one path (handler.go):
//
//  1. Idempotency: a call already executed (same agent_turn_id and
//     tool_call_id) returns its stored result and re-writes its receipt (an
//     identical card, so a no-op). The same ids with other arguments fail
//     bad_request: tool_call_id reuse.
//  2. Confirmation: a Spec whose policy says so for these arguments does not
//     execute. Its Plan checks the arguments against the data and describes
//     what would happen; a Pending record is stored and the call ends UTP
//     success with {"status":"PENDING_CONFIRM", "confirmation_id", ...}.
//  3. Execution: Run executes inside one write transaction, together with
//     the idempotency record (read again in that transaction: a call
//     recorded meanwhile is answered from it, never run twice), so a failed
//     call writes nothing. A commit whose outcome is unknown
//     (state.ErrUnknownOutcome) is retried (worker.ErrRetryLater). On the
//     shared state a transaction may run Run more than once (a commit that
//     conflicts with another worker's is retried), so Run has no effect
//     outside the transaction: side effects (publishing a notification)
//     run after the commit (Outcome.After).
//  4. Receipt: one atlas.receipt card per call (package receipts). A
//     receipt that cannot be written after a change committed does not
//     fail the call: the handler returns worker.ErrRetryLater, the command
//     is redelivered, and the replay writes the receipt and reports the
//     recorded result. For a call that changed nothing it fails the call
//     with upstream_unavailable, saying so.
//
// Pending confirmations are resolved through the service's confirmation
// endpoint, the svc request cg.<ver>.<project>.<channel>.svc.atlas-<group>.
// resolve, which ATLAS_CONFIRM and ATLAS_CANCEL (atlas.utility) call. The
// endpoint runs the pending call's Run with the ids of the original call and
// the time of the confirming call, marks the confirmation used in the same
// transaction, and writes a transition receipt into the original turn. A
// confirmation id is usable once; a repeat by the same confirming call
// returns the same answer (redelivery), any other fails bad_request naming
// what already happened.
//
// A confirming call whose request times out, or that the owner answers
// unavailable (the action ran but its transition receipt could not be
// written), is retried (worker.ErrRetryLater): the repeat gets the same
// resolution, and the receipt is written then.
package kit
