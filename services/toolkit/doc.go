// Package toolkit is the machinery every catalogue (ATLAS, ATP, CyNodeAI)
// builds its tools with, so that a catalogue keeps only its domain:
//
//   - Spec: one tool's description (name, description, JSON Schema, target,
//     Cedar action, scopes, risk, confirmation, principal, timeout) and
//     Spec.Tool, which makes it a worker.Tool around a handler and the
//     catalogue's Hooks (spec.go);
//   - Bind and BadRequest: argument binding whose failure is a bad_request
//     naming what was wrong (bind.go);
//   - Caller and Actor: who made a call — an operator only when the mesh
//     admitted the call as that operator's, else the calling agent
//     (principal.go);
//   - Hooks: guards that run before the handler (rate limits, operator-only
//     checks, a catalogue's own domain policy) and an audit hook that sees
//     every call's outcome (hooks.go);
//   - idempotency by (agent_turn_id, tool_call_id): the call record a
//     catalogue stores with its change, the replay of a recorded call and
//     the refusal of a tool_call_id reused for another call (idem.go),
//     and the records' end: Purge deletes them RecordMaxAge after they
//     were stored, PurgeLoop on a schedule (purge.go);
//   - the confirmation convention's rule (pkg/confirm): NeedsConfirm and
//     PendingTTL (confirm.go).
//
// The test harness of the three catalogues is package tooltest.
//
// Calls reach a catalogue's handler only after the mesh admitted them
// (the Cedar gate, the principal of options.principal): a guard holds a
// catalogue's own rules, defence in depth, never a second copy of the
// mesh's gate.
package toolkit

import "errors"

// Errors of the toolkit.
var (
	// ErrSpec: a Spec is incomplete or contradictory; the message names
	// the tool and the field.
	ErrSpec = errors.New("toolkit: bad tool spec")
	// ErrRecord: a stored call record cannot be read.
	ErrRecord = errors.New("toolkit: bad call record")
)
