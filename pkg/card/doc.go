// Package card defines the cards of the UTP mesh: immutable JSON facts kept in
// the CardStore, and boxes, the ordered lists of card ids that agents use as
// context.
//
// # Cards
//
// A card is written once and never changed. Its identity is card_id, a UUID
// (version 7 is recommended: its time prefix keeps ids roughly in write order).
// A card belongs to exactly one project; the CardStore never returns a card of
// one project to a request made for another.
//
// Two card types carry the UTP tool protocol:
//
//   - tool.call: written by the agent runtime before it publishes a tool
//     command. Its content is ToolCallContent: the tool name, the arguments
//     and the subject the command goes to. Tool services read their
//     parameters from this card, never from the command payload.
//   - tool.result: written by the tool service when the call ends. Its content
//     is ToolResultContent: status, after_execution, result and error. The
//     CardStore keeps at most one tool.result per (project, agent_turn_id,
//     tool_call_id); this is what makes tool execution exactly-once.
//
// Every other type is stored as it comes: content is any JSON value.
//
// # Canonical encoding
//
// Encode produces the canonical JSON of a card: fields in the documented
// order, content and metadata extension values compacted, created_at in
// RFC 3339 with nanoseconds in UTC. The CardStore compares canonical
// encodings to decide whether a second put of the same card_id is an
// idempotent repeat (same bytes: success) or a conflict (other bytes), so
// the encoding never changes: it is encoding/json's encoding of the Card
// struct (HTML-safe string escapes; metadata's typed fields in
// declaration order, or every key sorted when there are extension keys),
// which Encode writes in one pass. FuzzEncode and
// TestEncodeMatchesEncodingJSON hold it to encoding/json's bytes.
//
// # Decoding
//
// Decode (parse and validate), Parse (parse only, for bytes already
// trusted, such as a CardStore's own), Card.UnmarshalJSON,
// Metadata.UnmarshalJSON, ToolCall and ToolResult read JSON in one pass
// with a small reader of this package, without encoding/json's separate
// validation pass and reflection; a card's strings share one copy of its
// bytes. They give exactly encoding/json's result: input the reader does
// not reproduce — a key in another case or with escapes, a duplicate key,
// null for a string, invalid JSON, nesting deeper than 512 — is decoded by
// encoding/json instead, which also words the errors. FuzzFastDecode holds
// the two paths to the same result; TestFastDecodeCanonical checks that
// canonical cards take the one-pass path.
//
// # Invalid UTF-8
//
// JSON text is UTF-8, and encoding/json replaces every invalid byte with
// U+FFFD without a word, on decoding and on encoding alike. A card is
// therefore refused (ErrInvalid, naming the field's JSON path, such as
// content.arguments.text or metadata.agent_id) when any of its strings,
// keys included, holds invalid UTF-8: Decode checks the raw bytes,
// Validate the strings, content and metadata values of a card built in
// Go, and CheckUTF8 is the check itself for writers that decode cards
// inside a larger body (the CardStore's NATS server). Parse and
// UnmarshalJSON do not check: they read cards already stored.
//
// # Caveats
//
//   - Metadata keeps unknown keys (Extra) so that cards written by other
//     runtimes survive a round trip through Go; their values are compacted.
//   - created_at is set by the writer, not the store: a card re-sent after a
//     lost reply must be byte-identical to be accepted as a repeat.
//   - Decode validates shape and limits but not semantics that need the store
//     (that the card a box points to exists, for example).
//   - Card has its own UnmarshalJSON, so a json.Decoder's options
//     (DisallowUnknownFields, UseNumber) do not reach a card's fields:
//     unknown keys are skipped, as they are without those options.
package card
