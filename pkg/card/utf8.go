package card

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// CheckUTF8 returns nil when data, the JSON at field (a path such as
// "content", or "" for a whole document), is valid UTF-8. Otherwise it
// returns an error wrapping ErrInvalid that names the JSON path of the
// first string holding invalid UTF-8 ("content.arguments.text",
// "cards[0].metadata.agent_id") and the offending byte.
//
// JSON text must be UTF-8 (RFC 8259), and Go's encoding/json replaces each
// invalid byte with U+FFFD without a word: a card would be stored other
// than it was sent. Writers of cards check the raw bytes with CheckUTF8
// before decoding them (Decode does; the CardStore's NATS server checks
// every request body), and Validate checks a card's strings.
func CheckUTF8(field string, data []byte) error {
	if utf8.Valid(data) {
		return nil
	}
	off := firstInvalid(data)
	p, key, ok := invalidUTF8Path(data)
	where := joinPath(field, p)
	switch {
	case ok && key && where == "":
		where = "a key of the top-level object"
	case ok && key:
		where = "a key of " + where
	case where == "":
		where = "the JSON"
	}
	return fmt.Errorf("%w: %s holds invalid UTF-8 (byte 0x%02x at offset %d): JSON text must be UTF-8; send the text as UTF-8, and binary data base64-encoded",
		ErrInvalid, where, data[off], off)
}

// checkString is CheckUTF8 for a string field of a card.
func checkString(field, s string) error {
	if utf8.ValidString(s) {
		return nil
	}
	off := firstInvalid([]byte(s))
	return fmt.Errorf("%w: %s holds invalid UTF-8 (byte 0x%02x at offset %d): send the text as UTF-8", ErrInvalid, field, s[off], off)
}

// firstInvalid returns the offset of the first byte of data that does not
// start a valid UTF-8 sequence (data is known to hold one).
func firstInvalid(data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return 0
}

func joinPath(parent, child string) string {
	switch {
	case child == "":
		return parent
	case parent == "" || child[0] == '[':
		return parent + child
	}
	return parent + "." + child
}

// invalidUTF8Path walks the JSON in data and returns the path of the first
// string (or object key, key true) whose bytes are not valid UTF-8. ok is
// false when data is not JSON that far.
func invalidUTF8Path(data []byte) (path string, key, ok bool) {
	type frame struct {
		obj     bool
		wantKey bool
		key     string
		idx     int
	}
	var stack []frame
	pathOf := func() string {
		p := ""
		for _, f := range stack {
			if f.obj {
				p = joinPath(p, f.key)
			} else {
				p += "[" + strconv.Itoa(f.idx) + "]"
			}
		}
		return p
	}
	afterValue := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].obj {
				stack[n-1].wantKey = true
			} else {
				stack[n-1].idx++
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var prev int64
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false, false
		}
		off := dec.InputOffset()
		span := data[prev:off] // the token, and the separators before it
		prev = off
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				stack = append(stack, frame{obj: t == '{', wantKey: t == '{'})
			default:
				stack = stack[:len(stack)-1]
				afterValue()
			}
		case string:
			if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].wantKey {
				if !utf8.Valid(span) {
					stack = stack[: n-1 : n-1]
					return pathOf(), true, true
				}
				stack[n-1].key, stack[n-1].wantKey = t, false
				continue
			}
			if !utf8.Valid(span) {
				return pathOf(), false, true
			}
			afterValue()
		default:
			afterValue()
		}
	}
}
