package registry

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
)

// maxWalkDepth bounds the walk through in-place subschemas and nested
// values; CompileSchema refuses $ref cycles, so this is a backstop.
const maxWalkDepth = 256

// violations walks schema n over the decoded JSON value v (at instance
// pointer at) and returns every keyword it fails: the words of a refusal.
// It covers the keywords parameters schemas use; the library's verdict
// stays authoritative (see Schema).
func (s *Schema) violations(n *jsonschema.Schema, v any, at string) []violation {
	w := walker{s: s}
	w.walk(n, v, at, 0)
	return w.out
}

type walker struct {
	s   *Schema
	out []violation
}

func (w *walker) add(at, format string, args ...any) {
	w.out = append(w.out, violation{at, fmt.Sprintf(format, args...)})
}

// valid reports whether v satisfies n, per this walk.
func (w *walker) valid(n *jsonschema.Schema, v any, at string, depth int) bool {
	return len(w.sub(n, v, at, depth)) == 0
}

// sub walks n without recording into w.
func (w *walker) sub(n *jsonschema.Schema, v any, at string, depth int) []violation {
	c := walker{s: w.s}
	c.walk(n, v, at, depth)
	return c.out
}

func (w *walker) walk(n *jsonschema.Schema, v any, at string, depth int) {
	if n == nil || depth > maxWalkDepth {
		return
	}
	depth++
	if isFalse(n) {
		w.add(at, "not allowed (the schema is false)")
		return
	}
	if r := w.s.resolveRef(n.Ref); r != nil {
		w.walk(r, v, at, depth)
	}
	if !w.checkType(n, v, at) {
		return // the other keywords would only repeat it
	}
	if n.Enum != nil && !slices.ContainsFunc(n.Enum, func(e any) bool { return equalJSON(e, v) }) {
		vals := make([]string, len(n.Enum))
		for i, e := range n.Enum {
			vals[i] = jsonText(e)
		}
		w.add(at, "value must be one of %s", strings.Join(vals, ", "))
	}
	if n.Const != nil && !equalJSON(*n.Const, v) {
		w.add(at, "value must be %s", jsonText(*n.Const))
	}
	switch x := v.(type) {
	case float64:
		w.number(n, x, at)
	case string:
		w.str(n, x, at)
	case []any:
		w.array(n, x, at, depth)
	case map[string]any:
		w.object(n, x, at, depth)
	}
	w.logic(n, v, at, depth)
}

func (w *walker) checkType(n *jsonschema.Schema, v any, at string) bool {
	want := n.Types
	if n.Type != "" {
		want = []string{n.Type}
	}
	if len(want) == 0 {
		return true
	}
	got := jsonTypeOf(v)
	for _, t := range want {
		if t == got || t == "number" && got == "integer" {
			return true
		}
		if t == "integer" && got == "number" && isInteger(v.(float64)) {
			return true
		}
	}
	if got == "integer" {
		got = "number"
	}
	w.add(at, "expected %s, got %s", strings.Join(want, " or "), got)
	return false
}

func (w *walker) number(n *jsonschema.Schema, x float64, at string) {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	if m := n.MultipleOf; m != nil && *m > 0 {
		if q := x / *m; !isInteger(q) {
			w.add(at, "must be a multiple of %s, got %s", f(*m), f(x))
		}
	}
	if m := n.Minimum; m != nil && x < *m {
		w.add(at, "must be >= %s, got %s", f(*m), f(x))
	}
	if m := n.Maximum; m != nil && x > *m {
		w.add(at, "must be <= %s, got %s", f(*m), f(x))
	}
	if m := n.ExclusiveMinimum; m != nil && x <= *m {
		w.add(at, "must be > %s, got %s", f(*m), f(x))
	}
	if m := n.ExclusiveMaximum; m != nil && x >= *m {
		w.add(at, "must be < %s, got %s", f(*m), f(x))
	}
}

func (w *walker) str(n *jsonschema.Schema, x string, at string) {
	l := utf8.RuneCountInString(x)
	if m := n.MinLength; m != nil && l < *m {
		w.add(at, "must be at least %d %s long, got %d", *m, plural(*m, "character", "characters"), l)
	}
	if m := n.MaxLength; m != nil && l > *m {
		w.add(at, "must be at most %d %s long, got %d", *m, plural(*m, "character", "characters"), l)
	}
	if n.Pattern != "" {
		if re := w.s.patterns[n.Pattern]; re != nil && !re.MatchString(x) {
			w.add(at, "does not match pattern %q", n.Pattern)
		}
	}
}

func (w *walker) array(n *jsonschema.Schema, x []any, at string, depth int) {
	item := func(i int) string { return at + "/" + strconv.Itoa(i) }
	prefix := n.PrefixItems
	if len(n.ItemsArray) > 0 { // draft-07 tuple form
		prefix = n.ItemsArray
	}
	for i, ps := range prefix {
		if i < len(x) {
			w.walk(ps, x[i], item(i), depth)
		}
	}
	rest := n.Items
	if len(n.ItemsArray) > 0 {
		rest = n.AdditionalItems
	}
	if rest != nil {
		for i := len(prefix); i < len(x); i++ {
			if isFalse(rest) {
				w.add(at, "must have at most %d %s, got %d", len(prefix), plural(len(prefix), "item", "items"), len(x))
				break
			}
			w.walk(rest, x[i], item(i), depth)
		}
	}
	if n.Contains != nil {
		matches := 0
		for i, e := range x {
			if w.valid(n.Contains, e, item(i), depth) {
				matches++
			}
		}
		lo := 1
		if n.MinContains != nil {
			lo = *n.MinContains
		}
		if matches < lo {
			w.add(at, "must contain at least %d matching %s (contains), got %d", lo, plural(lo, "item", "items"), matches)
		}
		if m := n.MaxContains; m != nil && matches > *m {
			w.add(at, "must contain at most %d matching %s (contains), got %d", *m, plural(*m, "item", "items"), matches)
		}
	}
	if m := n.MinItems; m != nil && len(x) < *m {
		w.add(at, "must have at least %d %s, got %d", *m, plural(*m, "item", "items"), len(x))
	}
	if m := n.MaxItems; m != nil && len(x) > *m {
		w.add(at, "must have at most %d %s, got %d", *m, plural(*m, "item", "items"), len(x))
	}
	if n.UniqueItems {
	dup:
		for i := range x {
			for j := i + 1; j < len(x); j++ {
				if equalJSON(x[i], x[j]) {
					w.add(at, "items must be unique, but %d and %d are equal", i, j)
					break dup
				}
			}
		}
	}
}

func (w *walker) object(n *jsonschema.Schema, x map[string]any, at string, depth int) {
	prop := func(k string) string { return at + "/" + escapePtr(k) }
	keys := sortedKeys(x)
	var extra []string
	for _, k := range keys {
		matched := false
		if ps, ok := n.Properties[k]; ok {
			matched = true
			w.walk(ps, x[k], prop(k), depth)
		}
		for _, src := range sortedKeys(n.PatternProperties) {
			if re := w.s.patterns[src]; re != nil && re.MatchString(k) {
				matched = true
				w.walk(n.PatternProperties[src], x[k], prop(k), depth)
			}
		}
		if !matched && n.AdditionalProperties != nil {
			if isFalse(n.AdditionalProperties) {
				extra = append(extra, k)
			} else {
				w.walk(n.AdditionalProperties, x[k], prop(k), depth)
			}
		}
		if n.PropertyNames != nil {
			for _, pv := range w.sub(n.PropertyNames, k, prop(k), depth) {
				w.add(at, "property name %q: %s", k, pv.msg)
			}
		}
	}
	if len(extra) > 0 {
		w.add(at, "additional %s %s not allowed", plural(len(extra), "property", "properties"), quoteAll(extra))
	}
	if m := n.MinProperties; m != nil && len(x) < *m {
		w.add(at, "must have at least %d %s, got %d", *m, plural(*m, "property", "properties"), len(x))
	}
	if m := n.MaxProperties; m != nil && len(x) > *m {
		w.add(at, "must have at most %d %s, got %d", *m, plural(*m, "property", "properties"), len(x))
	}
	if miss := missing(x, n.Required); len(miss) > 0 {
		w.add(at, "missing required %s %s", plural(len(miss), "property", "properties"), strings.Join(miss, ", "))
	}
	deps := n.DependentRequired
	if len(n.DependencyStrings) > 0 {
		deps = n.DependencyStrings
	}
	for _, k := range sortedKeys(deps) {
		if _, ok := x[k]; ok {
			if miss := missing(x, deps[k]); len(miss) > 0 {
				w.add(at, "property %s requires %s %s", k, plural(len(miss), "property", "properties"), strings.Join(miss, ", "))
			}
		}
	}
	dschemas := n.DependentSchemas
	if len(n.DependencySchemas) > 0 {
		dschemas = n.DependencySchemas
	}
	for _, k := range sortedKeys(dschemas) {
		if _, ok := x[k]; ok {
			w.walk(dschemas[k], x, at, depth)
		}
	}
}

// logic applies allOf, anyOf, oneOf, not and if/then/else.
func (w *walker) logic(n *jsonschema.Schema, v any, at string, depth int) {
	for _, c := range n.AllOf {
		w.walk(c, v, at, depth)
	}
	if len(n.AnyOf) > 0 {
		var all []violation
		ok := false
		for _, c := range n.AnyOf {
			vs := w.sub(c, v, at, depth)
			if len(vs) == 0 {
				ok = true
				break
			}
			all = append(all, vs...)
		}
		if !ok {
			w.out = append(w.out, all...)
		}
	}
	if len(n.OneOf) > 0 {
		var all []violation
		var matched []string
		for i, c := range n.OneOf {
			vs := w.sub(c, v, at, depth)
			if len(vs) == 0 {
				matched = append(matched, strconv.Itoa(i))
			}
			all = append(all, vs...)
		}
		switch {
		case len(matched) == 0:
			w.out = append(w.out, all...)
		case len(matched) > 1:
			w.add(at, "must match exactly one oneOf branch, matches %s", strings.Join(matched, " and "))
		}
	}
	if n.Not != nil && w.valid(n.Not, v, at, depth) {
		w.add(at, "must not match the \"not\" schema")
	}
	if n.If != nil {
		if w.valid(n.If, v, at, depth) {
			w.walk(n.Then, v, at, depth)
		} else {
			w.walk(n.Else, v, at, depth)
		}
	}
}

func missing(x map[string]any, req []string) []string {
	var out []string
	for _, r := range req {
		if _, ok := x[r]; !ok {
			out = append(out, r)
		}
	}
	return out
}

func jsonTypeOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		if isInteger(x) {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func isInteger(f float64) bool { return !math.IsInf(f, 0) && f == math.Trunc(f) }

// equalJSON compares decoded JSON values (numbers by value).
func equalJSON(a, b any) bool {
	if x, ok := toFloat(a); ok {
		y, ok := toFloat(b)
		return ok && x == y
	}
	return reflect.DeepEqual(a, b)
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}
