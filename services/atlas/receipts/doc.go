// Package receipts records every ATLAS tool call in a receipt and reads a
// turn's receipt back.
//
// Each ATLAS call writes one card of type "atlas.receipt" (CardType) into
// the turn of its tool.call card, with the call's metadata (agent_id,
// agent_turn_id, step_id, tool_call_id) copied over. Its content is a Record:
// the seed's tool_calls entry (tool_name, args, status, result,
// timestamp_utc) plus the changes the call made, its undo step, warnings and
// errors. When ATLAS_CONFIRM or ATLAS_CANCEL resolves a pending call, a
// second Record (Kind "transition") goes into the original call's turn,
// recording PENDING_CONFIRM → OK, SKIPPED or FAILED and the changes and undo
// of the executed action.
//
// Receipt card ids are derived from the project, turn, tool call and kind
// (determ.CardID), so a retried write of the same record is a no-op.
//
// Assemble reads a turn's cards (cardstore.AllTurn) and folds them into the
// seed's receipt shape: {"tool_calls": [...]} plus changes, undo_steps,
// warnings, errors and transitions. An ATLAS call that the worker refused
// before its handler ran (arguments that fail the schema) has no receipt
// card; Assemble lists it from its tool.call and tool.result cards with
// status FAILED, so every ATLAS call of the turn appears.
package receipts
