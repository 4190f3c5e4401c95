package card

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// Encode returns the canonical JSON encoding of c (see the package doc).
// It does not validate c.
//
// The encoding is the one encoding/json gives the Card struct (fields in
// declaration order, HTML-escaped strings, content compacted, metadata as
// Metadata.MarshalJSON writes it), written in one pass: json.Marshal
// compacted the content twice and the metadata, with extra keys, three
// times (tests compare both on every card they see, FuzzEncode on any).
func Encode(c *Card) ([]byte, error) {
	b := make([]byte, 0, 192+len(c.Content)+len(c.CardID)+len(c.ProjectID))
	b = append(b, `{"card_id":`...)
	b = appendString(b, c.CardID)
	b = append(b, `,"project_id":`...)
	b = appendString(b, c.ProjectID)
	b = append(b, `,"type":`...)
	b = appendString(b, c.Type)
	if c.AuthorID != "" {
		b = append(b, `,"author_id":`...)
		b = appendString(b, c.AuthorID)
	}
	b = append(b, `,"content":`...)
	var err error
	if len(c.Content) == 0 {
		b = append(b, "null"...)
	} else if b, err = appendCompact(b, c.Content); err != nil {
		return nil, fmt.Errorf("%w: content is not valid JSON: %v", ErrInvalid, err)
	}
	b = append(b, `,"metadata":`...)
	if b, err = c.Metadata.appendJSON(b); err != nil {
		return nil, err
	}
	if c.ToolCallID != "" {
		b = append(b, `,"tool_call_id":`...)
		b = appendString(b, c.ToolCallID)
	}
	b = append(b, `,"created_at":`...)
	at, err := c.CreatedAt.UTC().MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("card %s: created_at: %w", c.CardID, err)
	}
	b = append(b, at...)
	return append(b, '}'), nil
}

// appendJSON appends the metadata object: the typed fields that are set,
// in declaration order, or, when there are extra keys, every key sorted
// (an extra key named like a typed field is dropped: the field wins).
func (m *Metadata) appendJSON(b []byte) ([]byte, error) {
	if len(m.Extra) == 0 {
		b = append(b, '{')
		first := true
		for _, f := range m.typed() {
			if f.set() {
				b = f.append(b, first)
				first = false
			}
		}
		return append(b, '}'), nil
	}
	type member struct {
		key   string
		typed metaField
		extra json.RawMessage
	}
	all := make([]member, 0, len(m.Extra)+len(metadataKnown))
	for _, f := range m.typed() {
		if f.set() {
			all = append(all, member{key: f.key, typed: f})
		}
	}
	for k, v := range m.Extra {
		if !metadataKnown[k] {
			all = append(all, member{key: k, extra: v})
		}
	}
	slices.SortFunc(all, func(a, b member) int { return cmpString(a.key, b.key) })
	b = append(b, '{')
	for i, mb := range all {
		if mb.extra == nil && mb.typed.key != "" {
			b = mb.typed.append(b, i == 0)
			continue
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, mb.key)
		b = append(b, ':')
		var err error
		if b, err = appendCompact(b, mb.extra); err != nil {
			return nil, fmt.Errorf("%w: metadata.%s is not valid JSON", ErrInvalid, mb.key)
		}
	}
	return append(b, '}'), nil
}

// metaField is one typed field of Metadata: a string, or turn_epoch.
type metaField struct {
	key string
	s   string
	n   int64
	num bool
}

func (f metaField) set() bool { return f.s != "" || (f.num && f.n != 0) }

func (f metaField) append(b []byte, first bool) []byte {
	if !first {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, f.key...)
	b = append(b, '"', ':')
	if f.num {
		return strconv.AppendInt(b, f.n, 10)
	}
	return appendString(b, f.s)
}

// typed lists the typed fields in declaration order (their JSON keys are
// plain ASCII: written without escaping).
func (m *Metadata) typed() [9]metaField {
	return [9]metaField{
		{key: "agent_id", s: m.AgentID},
		{key: "agent_turn_id", s: m.AgentTurnID},
		{key: "turn_epoch", n: m.TurnEpoch, num: true},
		{key: "step_id", s: m.StepID},
		{key: "tool_call_id", s: m.ToolCallID},
		{key: "trace_id", s: m.TraceID},
		{key: "parent_step_id", s: m.ParentStepID},
		{key: "function_name", s: m.FunctionName},
		{key: "role", s: m.Role},
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// appendString appends s as encoding/json writes a string: quoted, with
// <, > and & escaped (HTML-safe), invalid UTF-8 replaced. Strings of
// plain printable ASCII, which ids are, are copied as they are.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			enc, _ := json.Marshal(s) // a string always encodes
			return append(b, enc...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendCompact appends the JSON value raw compacted and HTML-escaped, as
// encoding/json writes a json.RawMessage.
func appendCompact(b, raw []byte) ([]byte, error) {
	buf := bytes.NewBuffer(b)
	start := len(b)
	if err := json.Compact(buf, raw); err != nil {
		return nil, err
	}
	b = buf.Bytes()
	if !bytes.ContainsAny(b[start:], "<>&\u2028\u2029") {
		return b, nil
	}
	var esc bytes.Buffer
	json.HTMLEscape(&esc, b[start:])
	return append(b[:start], esc.Bytes()...), nil
}
