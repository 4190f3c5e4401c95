package turn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// Op is the kind of a Change.
type Op string

// The kinds of change Diff reports.
const (
	// OpAdded: the path exists only in the new document.
	OpAdded Op = "added"
	// OpRemoved: the path exists only in the old document.
	OpRemoved Op = "removed"
	// OpChanged: the path exists in both with different values (or
	// different types).
	OpChanged Op = "changed"
)

// Change is one difference between two JSON documents.
type Change struct {
	// Path is the RFC 6901 JSON pointer of the value ("" is the whole
	// document, "/a/0/b" is key b of the first element of a).
	Path string `json:"path"`
	// Op is added, removed or changed.
	Op Op `json:"op"`
	// Old and New are the values on each side (Old absent when added, New
	// absent when removed), compact JSON.
	Old json.RawMessage `json:"old,omitempty"`
	New json.RawMessage `json:"new,omitempty"`
}

// String renders the change on one line: "changed /a: 1 → 2".
func (c Change) String() string {
	path := c.Path
	if path == "" {
		path = "(document)"
	}
	switch c.Op {
	case OpAdded:
		return fmt.Sprintf("added   %s: %s", path, inline(string(c.New)))
	case OpRemoved:
		return fmt.Sprintf("removed %s: %s", path, inline(string(c.Old)))
	}
	return fmt.Sprintf("changed %s: %s → %s", path, inline(string(c.Old)), inline(string(c.New)))
}

// maxDiffDepth bounds the nesting Diff descends into; deeper values are
// compared whole.
const maxDiffDepth = 256

// Diff compares two JSON documents structurally and returns their
// differences, ordered by path (object keys sorted, array elements by
// index). Numbers are equal when their values are (1 and 1.0 are equal);
// object key order and white space do not matter. Arrays are compared
// element by element: extra elements are added or removed at their index.
// Empty input on either side stands for an absent document. An input that
// is not valid JSON is an error naming the side.
func Diff(oldDoc, newDoc json.RawMessage) ([]Change, error) {
	a, aok, err := decodeDoc("old", oldDoc)
	if err != nil {
		return nil, err
	}
	b, bok, err := decodeDoc("new", newDoc)
	if err != nil {
		return nil, err
	}
	var out []Change
	switch {
	case !aok && !bok:
	case !aok:
		out = append(out, Change{Path: "", Op: OpAdded, New: encode(b)})
	case !bok:
		out = append(out, Change{Path: "", Op: OpRemoved, Old: encode(a)})
	default:
		diffValue(&out, "", a, b, 0)
	}
	return out, nil
}

func decodeDoc(side string, raw json.RawMessage) (any, bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, false, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false, fmt.Errorf("%w: %s document is not valid JSON: %v", ErrInvalid, side, err)
	}
	if dec.More() {
		return nil, false, fmt.Errorf("%w: %s document has data after its JSON value", ErrInvalid, side)
	}
	return v, true, nil
}

func diffValue(out *[]Change, path string, a, b any, depth int) {
	if depth >= maxDiffDepth {
		if !bytes.Equal(encode(a), encode(b)) {
			*out = append(*out, Change{Path: path, Op: OpChanged, Old: encode(a), New: encode(b)})
		}
		return
	}
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			break
		}
		keys := make([]string, 0, len(av)+len(bv))
		for k := range av {
			keys = append(keys, k)
		}
		for k := range bv {
			if _, dup := av[k]; !dup {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := path + "/" + escapePointer(k)
			x, inA := av[k]
			y, inB := bv[k]
			switch {
			case !inB:
				*out = append(*out, Change{Path: p, Op: OpRemoved, Old: encode(x)})
			case !inA:
				*out = append(*out, Change{Path: p, Op: OpAdded, New: encode(y)})
			default:
				diffValue(out, p, x, y, depth+1)
			}
		}
		return
	case []any:
		bv, ok := b.([]any)
		if !ok {
			break
		}
		for i := 0; i < max(len(av), len(bv)); i++ {
			p := path + "/" + strconv.Itoa(i)
			switch {
			case i >= len(bv):
				*out = append(*out, Change{Path: p, Op: OpRemoved, Old: encode(av[i])})
			case i >= len(av):
				*out = append(*out, Change{Path: p, Op: OpAdded, New: encode(bv[i])})
			default:
				diffValue(out, p, av[i], bv[i], depth+1)
			}
		}
		return
	default:
		if scalarEqual(a, b) {
			return
		}
	}
	*out = append(*out, Change{Path: path, Op: OpChanged, Old: encode(a), New: encode(b)})
}

// scalarEqual compares two decoded JSON scalars; numbers by value.
func scalarEqual(a, b any) bool {
	an, aok := a.(json.Number)
	bn, bok := b.(json.Number)
	if aok && bok {
		if an == bn {
			return true
		}
		x, okx := bigNumber(an)
		y, oky := bigNumber(bn)
		return okx && oky && x.Cmp(y) == 0
	}
	if aok || bok {
		return false
	}
	switch a.(type) {
	case map[string]any, []any:
		return false
	}
	return a == b
}

// bigNumber parses a JSON number exactly enough to compare it (512 bits of
// mantissa). Numbers with a decimal exponent beyond ±10000 or more than
// 1000 digits are not parsed (they then compare by their text), which
// keeps hostile input cheap.
func bigNumber(n json.Number) (*big.Float, bool) {
	s := string(n)
	if len(s) > 1000 {
		return nil, false
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(s[i+1:])
		if err != nil || e > 10000 || e < -10000 {
			return nil, false
		}
	}
	return new(big.Float).SetPrec(512).SetString(s)
}

func encode(v any) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return json.RawMessage(`null`)
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// escapePointer escapes one JSON pointer token (RFC 6901: ~ → ~0, / → ~1).
func escapePointer(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
