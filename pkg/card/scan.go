package card

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// This file holds the one-pass JSON reader behind the fast decoders of
// cards, metadata and tool contents (decode.go). It only accepts what
// encoding/json accepts, and every decoder that uses it gives up (ok =
// false) on anything whose meaning it does not reproduce exactly; the
// caller then decodes with encoding/json, which also produces the error
// message. FuzzFastDecode checks that both paths agree.

// maxScanDepth is the deepest nesting the reader follows; deeper values
// go to encoding/json (whose own limit is 10000).
const maxScanDepth = 512

// reader walks one JSON document. A method that returns false leaves pos
// anywhere: the caller abandons the document.
type reader struct {
	data []byte
	pos  int
}

// ws skips JSON white space.
func (r *reader) ws() {
	for r.pos < len(r.data) {
		switch r.data[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, or 0 at the end.
func (r *reader) peek() byte {
	r.ws()
	if r.pos < len(r.data) {
		return r.data[r.pos]
	}
	return 0
}

// end reports whether only white space is left.
func (r *reader) end() bool {
	r.ws()
	return r.pos == len(r.data)
}

// str reads a string token at pos (white space already skipped) and
// returns its span, quotes included. plain reports that the string has no
// escape and is valid UTF-8, so its text is exactly data[start+1:end-1].
func (r *reader) str() (start, end int, plain, ok bool) {
	d := r.data
	if r.pos >= len(d) || d[r.pos] != '"' {
		return 0, 0, false, false
	}
	start = r.pos
	i := r.pos + 1
	plain, ascii := true, true
	for i < len(d) {
		c := d[i]
		switch {
		case c == '"':
			r.pos = i + 1
			if !ascii && !utf8.Valid(d[start+1:i]) {
				plain = false
			}
			return start, r.pos, plain, true
		case c == '\\':
			plain = false
			if i+1 >= len(d) {
				return 0, 0, false, false
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) {
					return 0, 0, false, false
				}
				for _, h := range d[i+2 : i+6] {
					if !isHex(h) {
						return 0, 0, false, false
					}
				}
				i += 6
			default:
				return 0, 0, false, false
			}
		case c < 0x20:
			return 0, 0, false, false
		default:
			if c >= utf8.RuneSelf {
				ascii = false
			}
			i++
		}
	}
	return 0, 0, false, false
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number reads a number token at pos and returns its span and whether it
// is an integer (no fraction, no exponent).
func (r *reader) number() (start, end int, integer, ok bool) {
	d := r.data
	i := r.pos
	start = i
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	default:
		return 0, 0, false, false
	}
	integer = true
	if i < len(d) && d[i] == '.' {
		integer = false
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return 0, 0, false, false
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		integer = false
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return 0, 0, false, false
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	r.pos = i
	return start, i, integer, true
}

// literal reads word (true, false or null) at pos.
func (r *reader) literal(word string) bool {
	if len(r.data)-r.pos < len(word) || string(r.data[r.pos:r.pos+len(word)]) != word {
		return false
	}
	r.pos += len(word)
	return true
}

// value reads any value at pos (after white space) and returns its span.
func (r *reader) value(depth int) (start, end int, ok bool) {
	if r.peek() == 0 {
		return 0, 0, false
	}
	start = r.pos
	if !r.skip(depth) {
		return 0, 0, false
	}
	return start, r.pos, true
}

// skip reads one value at pos (white space already skipped).
func (r *reader) skip(depth int) bool {
	if depth > maxScanDepth {
		return false
	}
	switch c := r.data[r.pos]; {
	case c == '"':
		_, _, _, ok := r.str()
		return ok
	case c == '{':
		r.pos++
		if r.peek() == '}' {
			r.pos++
			return true
		}
		for {
			if r.peek() != '"' {
				return false
			}
			if _, _, _, ok := r.str(); !ok || r.peek() != ':' {
				return false
			}
			r.pos++
			if r.peek() == 0 || !r.skip(depth+1) {
				return false
			}
			switch r.peek() {
			case ',':
				r.pos++
			case '}':
				r.pos++
				return true
			default:
				return false
			}
		}
	case c == '[':
		r.pos++
		if r.peek() == ']' {
			r.pos++
			return true
		}
		for {
			if r.peek() == 0 || !r.skip(depth+1) {
				return false
			}
			switch r.peek() {
			case ',':
				r.pos++
			case ']':
				r.pos++
				return true
			default:
				return false
			}
		}
	case c == 't':
		return r.literal("true")
	case c == 'f':
		return r.literal("false")
	case c == 'n':
		return r.literal("null")
	case c == '-' || isDigit(c):
		_, _, _, ok := r.number()
		return ok
	}
	return false
}

// open reads the '{' of an object at pos (after white space). The
// caller then calls key(0), key(1)… until done, reading each member's
// value after its key.
func (r *reader) open() bool {
	if r.peek() != '{' {
		return false
	}
	r.pos++
	return true
}

// key reads what comes before member i of an open object: the ',' (for
// i > 0), the key and the ':'. It returns the key's text, or done at the
// closing '}'. Keys with escapes or non-ASCII bytes end the read (ok =
// false): encoding/json matches them to fields in ways the fast decoders
// do not reproduce.
func (r *reader) key(i int) (key []byte, done, ok bool) {
	c := r.peek()
	if c == '}' {
		r.pos++
		return nil, true, true
	}
	if i > 0 {
		if c != ',' {
			return nil, false, false
		}
		r.pos++
		c = r.peek()
	}
	if c != '"' {
		return nil, false, false
	}
	s, e, plain, ok := r.str()
	if !ok || !plain || !asciiOnly(r.data[s+1:e-1]) || r.peek() != ':' {
		return nil, false, false
	}
	r.pos++
	if r.peek() == 0 {
		return nil, false, false
	}
	return r.data[s+1 : e-1], false, true
}

func asciiOnly(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// text reads a string value at pos and returns its text. src, when not
// empty, is string(r.data): a plain string is then a substring of it and
// costs no allocation. A null, or any other token, is ok = false.
func (r *reader) text(src string) (string, bool) {
	s, e, plain, ok := r.str()
	if !ok {
		return "", false
	}
	if plain {
		if src != "" {
			return src[s+1 : e-1], true
		}
		return string(r.data[s+1 : e-1]), true
	}
	var out string
	if json.Unmarshal(r.data[s:e], &out) != nil {
		return "", false
	}
	return out, true
}

// raw reads any value at pos and returns a copy of its bytes, as
// json.RawMessage decoding does.
func (r *reader) raw() (json.RawMessage, bool) {
	s, e, ok := r.value(0)
	if !ok {
		return nil, false
	}
	return append(json.RawMessage(nil), r.data[s:e]...), true
}

// int64 reads an integer number value at pos, as encoding/json decodes one
// into an int64: no fraction or exponent, in range.
func (r *reader) int64() (int64, bool) {
	s, e, integer, ok := r.number()
	if !ok || !integer {
		return 0, false
	}
	n, err := strconv.ParseInt(string(r.data[s:e]), 10, 64)
	return n, err == nil
}

// foldsTo reports whether key (ASCII, see key) is a name encoding/json
// would match, ignoring case, to one of names, the fields of the struct it
// decodes into. The fast decoders skip other unknown keys, as encoding/json
// does, and give up on these.
func foldsTo(key []byte, names ...string) bool {
	for _, n := range names {
		if len(n) == len(key) && equalFoldASCII(key, n) {
			return true
		}
	}
	return false
}

func equalFoldASCII(b []byte, s string) bool {
	for i := range b {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
