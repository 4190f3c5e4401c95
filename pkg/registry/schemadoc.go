package registry

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// The "$schema" values google/jsonschema-go recognises, one per supported
// draft: the library picks a draft by this exact string (anything else is
// validated as 2020-12 and then refused by Validate), so CompileSchema
// rewrites every accepted spelling to these (canonicalDraft).
const (
	draft202012 = "https://json-schema.org/draft/2020-12/schema"
	draft07     = "http://json-schema.org/draft-07/schema#"
)

// draftSpellings maps each accepted "$schema" value, without its scheme
// and without a trailing empty fragment ("#"), to the draft it names and
// the schemes it may be written with: draft-07's own id is http but the
// site serves it over https too, so both are common; 2020-12's is https.
var draftSpellings = map[string]struct {
	canonical string
	schemes   []string
}{
	"json-schema.org/draft/2020-12/schema": {draft202012, []string{"https"}},
	"json-schema.org/draft-07/schema":      {draft07, []string{"http", "https"}},
}

// legacyDrafts names the drafts the registry once accepted (before it
// compiled schemas with google/jsonschema-go) and refuses now, each with
// what to write instead; the key is as in draftSpellings.
var legacyDrafts = map[string]string{
	"json-schema.org/draft-03/schema":      `draft-03, no longer validated: rewrite the schema for draft 2020-12 (omit "$schema") or draft-07 ("$schema": "` + draft07 + `")`,
	"json-schema.org/draft-04/schema":      `draft-04, no longer validated: write "$schema": "` + draft07 + `" (and "$id" for "id", numbers for a boolean exclusiveMinimum/exclusiveMaximum), or omit "$schema" for draft 2020-12`,
	"json-schema.org/draft-06/schema":      `draft-06, no longer validated: write "$schema": "` + draft07 + `" (a draft-06 schema means the same in draft-07), or omit "$schema" for draft 2020-12`,
	"json-schema.org/draft/2019-09/schema": `draft 2019-09, no longer validated: write "$schema": "` + draft202012 + `" or omit it (an array "items" becomes "prefixItems", "$recursiveRef" becomes "$dynamicRef")`,
}

// canonicalDraft returns the library's spelling of the draft a "$schema"
// value names ("" for ""), or an error saying what to write instead:
// accepted are draft 2020-12 (https, with or without a trailing "#") and
// draft-07 (http or https, with or without "#"); draft-03, -04, -06 and
// 2019-09 are refused with their own advice, anything else as unknown.
func canonicalDraft(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	scheme, rest, ok := strings.Cut(v, "://")
	if !ok {
		scheme, rest = "", v
	}
	rest = strings.TrimSuffix(rest, "#")
	if d, ok := draftSpellings[rest]; ok {
		if slices.Contains(d.schemes, scheme) {
			return d.canonical, nil
		}
		return "", fmt.Errorf("at /$schema: unsupported spelling %q: write %q", v, d.canonical)
	}
	if advice, ok := legacyDrafts[rest]; ok {
		return "", fmt.Errorf("at /$schema: unsupported draft %q: %s", v, advice)
	}
	return "", fmt.Errorf("at /$schema: unsupported draft %q (use draft 2020-12, the default, or draft-07: %q)", v, draft07)
}

// normalizeDraft rewrites root's "$schema" to the library's spelling of
// its draft (canonicalDraft); checkDoc has accepted it already.
func normalizeDraft(root *jsonschema.Schema) {
	if c, err := canonicalDraft(root.Schema); err == nil {
		root.Schema = c
	}
}

// Keyword shapes checkDoc enforces: the structural part of the 2020-12 and
// draft-07 meta-schemas (the library decodes a schema into Go types but
// does not check it against its meta-schema).
var (
	kwSchema    = []string{"additionalProperties", "additionalItems", "not", "if", "then", "else", "contains", "propertyNames", "unevaluatedProperties", "unevaluatedItems", "contentSchema"}
	kwSchemaMap = []string{"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
	kwSchemaArr = []string{"allOf", "anyOf", "oneOf", "prefixItems"}
	kwCount     = []string{"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties", "minContains", "maxContains"}
	kwNumber    = []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
	kwString    = []string{"$schema", "$id", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "$comment", "pattern", "format", "title", "description", "contentEncoding", "contentMediaType"}
	kwBool      = []string{"uniqueItems", "readOnly", "writeOnly", "deprecated"}
	jsonTypes   = []string{"null", "boolean", "object", "array", "number", "string", "integer"}
)

// checkDoc checks the shape of every keyword of a decoded schema document,
// naming the JSON pointer of the first bad one: "at /minProperties: must
// be a non-negative integer".
func checkDoc(doc any) error {
	if m, ok := doc.(map[string]any); ok {
		if v, ok := m["$schema"].(string); ok {
			if _, err := canonicalDraft(v); err != nil {
				return err
			}
		}
	}
	return checkSchemaDoc(doc, "")
}

func checkSchemaDoc(doc any, at string) error {
	if _, ok := doc.(bool); ok {
		return nil
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return atErr(at, "a schema must be an object or a boolean")
	}
	for _, k := range sortedKeys(m) {
		v, p := m[k], at+"/"+escapePtr(k)
		var err error
		switch {
		case slices.Contains(kwSchema, k):
			err = checkSchemaDoc(v, p)
		case slices.Contains(kwSchemaMap, k):
			err = checkMap(v, p, checkSchemaDoc)
		case slices.Contains(kwSchemaArr, k):
			err = checkArray(v, p, k != "prefixItems", checkSchemaDoc)
		case k == "items":
			if _, ok := v.([]any); ok {
				err = checkArray(v, p, false, checkSchemaDoc)
			} else {
				err = checkSchemaDoc(v, p)
			}
		case k == "dependencies":
			err = checkMap(v, p, func(d any, p string) error {
				if _, ok := d.([]any); ok {
					return checkStrings(d, p)
				}
				return checkSchemaDoc(d, p)
			})
		case slices.Contains(kwCount, k):
			if f, ok := v.(float64); !ok || f < 0 || f != math.Trunc(f) || f > math.MaxInt32 {
				err = atErr(p, "must be a non-negative integer")
			}
		case slices.Contains(kwNumber, k):
			if _, ok := v.(float64); !ok {
				err = atErr(p, "must be a number")
			}
		case k == "multipleOf":
			if f, ok := v.(float64); !ok || f <= 0 {
				err = atErr(p, "must be a number greater than 0")
			}
		case slices.Contains(kwString, k):
			if _, ok := v.(string); !ok {
				err = atErr(p, "must be a string")
			}
		case slices.Contains(kwBool, k):
			if _, ok := v.(bool); !ok {
				err = atErr(p, "must be a boolean")
			}
		case k == "required":
			err = checkStrings(v, p)
		case k == "dependentRequired":
			err = checkMap(v, p, checkStrings)
		case k == "enum":
			if _, ok := v.([]any); !ok {
				err = atErr(p, "must be an array")
			}
		case k == "type":
			err = checkType(v, p)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func atErr(at, msg string) error {
	if at == "" {
		at = "(root)"
	}
	return fmt.Errorf("at %s: %s", at, msg)
}

func checkMap(v any, at string, each func(any, string) error) error {
	m, ok := v.(map[string]any)
	if !ok {
		return atErr(at, "must be an object")
	}
	for _, k := range sortedKeys(m) {
		if err := each(m[k], at+"/"+escapePtr(k)); err != nil {
			return err
		}
	}
	return nil
}

func checkArray(v any, at string, nonEmpty bool, each func(any, string) error) error {
	a, ok := v.([]any)
	if !ok || nonEmpty && len(a) == 0 {
		return atErr(at, "must be a non-empty array")
	}
	for i, e := range a {
		if err := each(e, at+"/"+strconv.Itoa(i)); err != nil {
			return err
		}
	}
	return nil
}

func checkStrings(v any, at string) error {
	a, ok := v.([]any)
	if !ok {
		return atErr(at, "must be an array of unique strings")
	}
	seen := map[string]bool{}
	for _, e := range a {
		s, ok := e.(string)
		if !ok || seen[s] {
			return atErr(at, "must be an array of unique strings")
		}
		seen[s] = true
	}
	return nil
}

func checkType(v any, at string) error {
	names := []any{v}
	if a, ok := v.([]any); ok {
		if len(a) == 0 {
			return atErr(at, "must be a type name or a non-empty array of type names")
		}
		names = a
	}
	for _, n := range names {
		if s, ok := n.(string); !ok || !slices.Contains(jsonTypes, s) {
			return atErr(at, "must be one of "+strings.Join(jsonTypes, ", ")+" (or an array of them)")
		}
	}
	return nil
}

// prepare compiles the regular expressions of every subschema and refuses
// $ref cycles that apply to the same instance value (they would never
// end: {"$ref": "#"}).
func (s *Schema) prepare() error {
	var errs []string
	var walk func(*jsonschema.Schema)
	walk = func(n *jsonschema.Schema) {
		if n.Pattern != "" {
			s.compilePattern(n.Pattern, &errs)
		}
		for src := range n.PatternProperties {
			s.compilePattern(src, &errs)
		}
		for _, c := range children(n) {
			walk(c)
		}
	}
	walk(s.root)
	if len(errs) > 0 {
		return fmt.Errorf("%s", errs[0])
	}
	return s.checkRefCycles()
}

func (s *Schema) compilePattern(src string, errs *[]string) {
	if _, ok := s.patterns[src]; ok {
		return
	}
	re, err := regexp.Compile(src)
	if err != nil {
		*errs = append(*errs, fmt.Sprintf("pattern %q: %v", src, err))
		return
	}
	s.patterns[src] = re
}

// inPlace lists the subschemas of n that apply to the same instance value.
func (s *Schema) inPlace(n *jsonschema.Schema) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	if r := s.resolveRef(n.Ref); r != nil {
		out = append(out, r)
	}
	out = append(out, n.AllOf...)
	out = append(out, n.AnyOf...)
	out = append(out, n.OneOf...)
	for _, c := range []*jsonschema.Schema{n.Not, n.If, n.Then, n.Else} {
		if c != nil {
			out = append(out, c)
		}
	}
	for _, k := range sortedKeys(n.DependentSchemas) {
		out = append(out, n.DependentSchemas[k])
	}
	for _, k := range sortedKeys(n.DependencySchemas) {
		out = append(out, n.DependencySchemas[k])
	}
	return out
}

func (s *Schema) checkRefCycles() error {
	const (
		visiting = 1
		done     = 2
	)
	state := map[*jsonschema.Schema]int{}
	var visit func(*jsonschema.Schema) error
	visit = func(n *jsonschema.Schema) error {
		switch state[n] {
		case visiting:
			return fmt.Errorf("$ref cycle: a schema refers back to itself without descending into the value (at $ref %q)", n.Ref)
		case done:
			return nil
		}
		state[n] = visiting
		for _, c := range s.inPlace(n) {
			if err := visit(c); err != nil {
				return err
			}
		}
		state[n] = done
		return nil
	}
	var all func(*jsonschema.Schema) error
	all = func(n *jsonschema.Schema) error {
		if err := visit(n); err != nil {
			return err
		}
		for _, c := range children(n) {
			if err := all(c); err != nil {
				return err
			}
		}
		return nil
	}
	return all(s.root)
}

// children lists every direct subschema of n.
func children(n *jsonschema.Schema) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	for _, c := range []*jsonschema.Schema{n.Items, n.AdditionalItems, n.Contains, n.AdditionalProperties, n.PropertyNames,
		n.Not, n.If, n.Then, n.Else, n.UnevaluatedItems, n.UnevaluatedProperties, n.ContentSchema} {
		if c != nil {
			out = append(out, c)
		}
	}
	for _, l := range [][]*jsonschema.Schema{n.PrefixItems, n.ItemsArray, n.AllOf, n.AnyOf, n.OneOf} {
		out = append(out, l...)
	}
	for _, m := range []map[string]*jsonschema.Schema{n.Properties, n.PatternProperties, n.Defs, n.Definitions, n.DependentSchemas, n.DependencySchemas} {
		for _, k := range sortedKeys(m) {
			out = append(out, m[k])
		}
	}
	return out
}

// resolveRef finds the target of a $ref inside the document: "#" or a
// JSON pointer fragment ("#/$defs/name"), optionally after the document's
// own URL. Anchors and $id-relative references return nil (the verdict is
// still the library's; only the wording of a refusal is poorer).
func (s *Schema) resolveRef(ref string) *jsonschema.Schema {
	if ref == "" {
		return nil
	}
	ref = strings.TrimPrefix(ref, schemaURL)
	ref = strings.TrimPrefix(ref, "parameters.json")
	if !strings.HasPrefix(ref, "#") {
		return nil
	}
	frag := ref[1:]
	if frag == "" {
		return s.root
	}
	if !strings.HasPrefix(frag, "/") {
		return nil
	}
	cur := reflect.ValueOf(*s.root)
	node := s.root
	toks := strings.Split(frag[1:], "/")
	for i := 0; i < len(toks); i++ {
		tok := unescapePtr(toks[i])
		f, ok := schemaField(cur.Type(), tok)
		if !ok {
			return nil
		}
		fv := cur.FieldByIndex(f.Index)
		switch fv.Interface().(type) {
		case *jsonschema.Schema:
			node, _ = fv.Interface().(*jsonschema.Schema)
		case []*jsonschema.Schema, map[string]*jsonschema.Schema:
			if i+1 >= len(toks) {
				return nil
			}
			i++
			node = pick(fv.Interface(), unescapePtr(toks[i]))
		default:
			return nil
		}
		if node == nil {
			return nil
		}
		cur = reflect.ValueOf(*node)
	}
	return node
}

// pick indexes a subschema list or map.
func pick(v any, key string) *jsonschema.Schema {
	switch c := v.(type) {
	case []*jsonschema.Schema:
		i, err := strconv.Atoi(key)
		if err != nil || i < 0 || i >= len(c) {
			return nil
		}
		return c[i]
	case map[string]*jsonschema.Schema:
		return c[key]
	}
	return nil
}

// schemaField finds the field of jsonschema.Schema a keyword decodes into.
func schemaField(t reflect.Type, kw string) (reflect.StructField, bool) {
	if kw == "items" {
		f, ok := t.FieldByName("Items")
		return f, ok
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name == kw {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func unescapePtr(t string) string {
	return strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
}

// deref follows n's $ref when n is only a reference (what a properties
// lookup needs of the root).
func (s *Schema) deref(n *jsonschema.Schema) *jsonschema.Schema {
	for range 8 {
		r := s.resolveRef(n.Ref)
		if r == nil || len(n.Properties) > 0 {
			return n
		}
		n = r
	}
	return n
}

// isFalse reports whether n is the schema false (the library decodes it
// as {"not": {}}).
func isFalse(n *jsonschema.Schema) bool {
	return n != nil && n.Not != nil && reflect.ValueOf(*n.Not).IsZero()
}
