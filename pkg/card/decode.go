package card

import (
	"encoding/json"
	"fmt"
)

// Fast decoders. Each reads its JSON in one pass with reader (scan.go) and
// gives up on anything unusual — an unknown key that encoding/json would
// match ignoring case, a duplicate key, a null where a string belongs, a
// key with escapes, invalid JSON — in which case the caller decodes with
// encoding/json exactly as before (and gets its error messages).
// FuzzFastDecode holds each fast decoder to its encoding/json result.

// cardJSON is Card without its UnmarshalJSON method: what encoding/json
// decodes when the fast path gives up.
type cardJSON Card

// UnmarshalJSON decodes a card in one pass, with the result of
// encoding/json's reflection-based decoding (which it falls back to for
// input the fast path does not handle). Fields absent from data keep
// their values; null leaves c unchanged. It does not validate: use Decode
// for that.
func (c *Card) UnmarshalJSON(data []byte) error {
	if parseCard(data, c) {
		return nil
	}
	return json.Unmarshal(data, (*cardJSON)(c))
}

// Parse decodes one card without validating it, like json.Unmarshal into
// a Card but without encoding/json's separate validation pass. It is for
// bytes the caller already trusts to be a valid card, such as a
// CardStore's own canonical encodings; Decode is Parse plus Validate.
func Parse(data []byte) (*Card, error) {
	var c Card
	if parseCard(data, &c) {
		return &c, nil
	}
	if err := json.Unmarshal(data, (*cardJSON)(&c)); err != nil {
		return nil, err
	}
	return &c, nil
}

// Bits of the card members seen, to refuse duplicates.
const (
	seenCardID = 1 << iota
	seenProject
	seenType
	seenAuthor
	seenContent
	seenMetadata
	seenToolCallID
	seenCreatedAt
)

var cardNames = []string{"card_id", "project_id", "type", "author_id", "content", "metadata", "tool_call_id", "created_at"}

// parseCard is the fast path of UnmarshalJSON: it sets *c and reports true,
// or leaves *c alone and reports false. Strings of the card share one copy
// of data.
func parseCard(data []byte, c *Card) bool {
	r := reader{data: data}
	if r.peek() == 'n' {
		return r.literal("null") && r.end()
	}
	if !r.open() {
		return false
	}
	src := string(data)
	out := *c
	seen := 0
	for i := 0; ; i++ {
		k, done, ok := r.key(i)
		if !ok {
			return false
		}
		if done {
			break
		}
		var bit int
		switch string(k) {
		case "card_id":
			bit = seenCardID
			out.CardID, ok = r.text(src)
		case "project_id":
			bit = seenProject
			out.ProjectID, ok = r.text(src)
		case "type":
			bit = seenType
			out.Type, ok = r.text(src)
		case "author_id":
			bit = seenAuthor
			out.AuthorID, ok = r.text(src)
		case "content":
			bit = seenContent
			out.Content, ok = r.raw()
		case "metadata":
			bit = seenMetadata
			if r.peek() == 'n' {
				out.Metadata, ok = Metadata{}, r.literal("null")
			} else {
				out.Metadata, ok = parseMetadata(&r, src)
			}
		case "tool_call_id":
			bit = seenToolCallID
			out.ToolCallID, ok = r.text(src)
		case "created_at":
			bit = seenCreatedAt
			s, e, _, sok := r.str()
			// time.Time's own UnmarshalJSON, on the token as encoding/json
			// would pass it.
			ok = sok && out.CreatedAt.UnmarshalJSON(data[s:e]) == nil
		default:
			if foldsTo(k, cardNames...) {
				return false
			}
			ok = r.skip(0)
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
	}
	if !r.end() {
		return false
	}
	*c = out
	return true
}

var metadataNames = []string{"agent_id", "agent_turn_id", "turn_epoch", "step_id", "tool_call_id", "trace_id", "parent_step_id", "function_name", "role"}

// parseMetadata reads a metadata object at r's position in one pass. src is
// string(r.data) (or ""; see reader.text).
func parseMetadata(r *reader, src string) (Metadata, bool) {
	var m Metadata
	if !r.open() {
		return m, false
	}
	seen := 0
	for i := 0; ; i++ {
		k, done, ok := r.key(i)
		if !ok {
			return m, false
		}
		if done {
			return m, true
		}
		var field *string
		bit := 0
		switch string(k) {
		case "agent_id":
			field, bit = &m.AgentID, 1<<0
		case "agent_turn_id":
			field, bit = &m.AgentTurnID, 1<<1
		case "step_id":
			field, bit = &m.StepID, 1<<2
		case "tool_call_id":
			field, bit = &m.ToolCallID, 1<<3
		case "trace_id":
			field, bit = &m.TraceID, 1<<4
		case "parent_step_id":
			field, bit = &m.ParentStepID, 1<<5
		case "function_name":
			field, bit = &m.FunctionName, 1<<6
		case "role":
			field, bit = &m.Role, 1<<7
		case "turn_epoch":
			bit = 1 << 8
			m.TurnEpoch, ok = r.int64()
		default:
			if foldsTo(k, metadataNames...) {
				return m, false
			}
			if _, dup := m.Extra[string(k)]; dup {
				return m, false
			}
			raw, rok := r.raw()
			if !rok {
				return m, false
			}
			if m.Extra == nil {
				m.Extra = make(map[string]json.RawMessage)
			}
			m.Extra[string(k)] = raw
			continue
		}
		if field != nil {
			*field, ok = r.text(src)
		}
		if !ok || seen&bit != 0 {
			return m, false
		}
		seen |= bit
	}
}

var toolCallNames = []string{"tool_name", "arguments", "target_subject"}

// parseToolCall is the fast path of ToolCall's content decoding.
func parseToolCall(data []byte) (ToolCallContent, bool) {
	var tc ToolCallContent
	r := reader{data: data}
	if !r.open() {
		return tc, false
	}
	src := string(data)
	seen := 0
	for i := 0; ; i++ {
		k, done, ok := r.key(i)
		if !ok {
			return tc, false
		}
		if done {
			break
		}
		bit := 0
		switch string(k) {
		case "tool_name":
			bit = 1 << 0
			tc.ToolName, ok = r.text(src)
		case "arguments":
			bit = 1 << 1
			tc.Arguments, ok = r.raw()
		case "target_subject":
			bit = 1 << 2
			tc.TargetSubject, ok = r.text(src)
		default:
			if foldsTo(k, toolCallNames...) {
				return tc, false
			}
			ok = r.skip(0)
		}
		if !ok || seen&bit != 0 {
			return tc, false
		}
		seen |= bit
	}
	return tc, r.end()
}

var toolResultNames = []string{"status", "after_execution", "result", "error"}

// parseToolResult is the fast path of ToolResult's content decoding.
func parseToolResult(data []byte) (ToolResultContent, bool) {
	var tr ToolResultContent
	r := reader{data: data}
	if !r.open() {
		return tr, false
	}
	seen := 0
	for i := 0; ; i++ {
		k, done, ok := r.key(i)
		if !ok {
			return tr, false
		}
		if done {
			break
		}
		bit := 0
		switch string(k) {
		case "status":
			bit = 1 << 0
			var s string
			s, ok = r.word()
			tr.Status = Status(s)
		case "after_execution":
			bit = 1 << 1
			var s string
			s, ok = r.word()
			tr.AfterExecution = AfterExecution(s)
		case "result":
			bit = 1 << 2
			tr.Result, ok = r.raw()
		case "error":
			bit = 1 << 3
			if r.peek() == 'n' {
				tr.Error, ok = nil, r.literal("null")
			} else {
				tr.Error, ok = parseError(&r)
			}
		default:
			if foldsTo(k, toolResultNames...) {
				return tr, false
			}
			ok = r.skip(0)
		}
		if !ok || seen&bit != 0 {
			return tr, false
		}
		seen |= bit
	}
	return tr, r.end()
}

var errorNames = []string{"code", "message", "detail"}

// parseError reads the error object of a tool result.
func parseError(r *reader) (*Error, bool) {
	var e Error
	if !r.open() {
		return nil, false
	}
	seen := 0
	for i := 0; ; i++ {
		k, done, ok := r.key(i)
		if !ok {
			return nil, false
		}
		if done {
			return &e, true
		}
		bit := 0
		switch string(k) {
		case "code":
			bit = 1 << 0
			var s string
			s, ok = r.text("")
			e.Code = ErrorCode(s)
		case "message":
			bit = 1 << 1
			e.Message, ok = r.text("")
		case "detail":
			bit = 1 << 2
			e.Detail, ok = r.raw()
		default:
			if foldsTo(k, errorNames...) {
				return nil, false
			}
			ok = r.skip(0)
		}
		if !ok || seen&bit != 0 {
			return nil, false
		}
		seen |= bit
	}
}

// word reads a string value that is usually one of the UTP status or
// after_execution words, without allocating for those.
func (r *reader) word() (string, bool) {
	s, e, plain, ok := r.str()
	if !ok {
		return "", false
	}
	if plain {
		switch w := r.data[s+1 : e-1]; string(w) {
		case "success":
			return "success", true
		case "failed":
			return "failed", true
		case "canceled":
			return "canceled", true
		case "timeout":
			return "timeout", true
		case "partial":
			return "partial", true
		case "suspend":
			return "suspend", true
		case "terminate":
			return "terminate", true
		}
	}
	r.pos = s
	return r.text("")
}

// metadataJSON is the error prefix of Metadata.UnmarshalJSON.
func metadataJSON(err error) error { return fmt.Errorf("metadata: %w", err) }
