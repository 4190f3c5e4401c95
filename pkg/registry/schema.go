package registry

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// schemaURL is the in-memory location parameters schemas are compiled at.
const schemaURL = "mem:///registry/parameters.json"

// Schema is a compiled parameters schema. It is immutable and safe for
// concurrent use; compile once per entry and reuse it for every call.
//
// The verdict of Validate is google/jsonschema-go's; the words of a
// refusal (the instance path of every violation and what was wrong) come
// from this package's walk of the same schema (violations.go), since the
// library stops at the first error and names schema paths only.
type Schema struct {
	root     *jsonschema.Schema
	resolved *jsonschema.Resolved
	// patterns holds the compiled "pattern" and "patternProperties"
	// regular expressions of every subschema, by source text.
	patterns map[string]*regexp.Regexp
}

// errExternalRef is what the loader answers: parameters are self-contained.
var errExternalRef = errors.New("not allowed (parameters must be self-contained)")

// refuseLoader refuses every external reference: a parameters schema must
// be self-contained ($ref only within the document). This keeps the
// registry from reading files or the network.
func refuseLoader(u *url.URL) (*jsonschema.Schema, error) {
	return nil, fmt.Errorf("external reference %q %w", strings.Replace(u.String(), schemaURL, "parameters", 1), errExternalRef)
}

// CompileSchema compiles a JSON Schema (draft 2020-12 unless its $schema
// names draft-07, the other supported draft). External $ref targets are
// refused, and so is a $ref cycle that never descends into the instance.
// The error is a *FieldError for field "parameters" naming the schema
// problem and, when it is one keyword, its JSON pointer in the schema
// ("at /minProperties: ..."). CompileSchema does not require
// "type":"object"; Validate does.
func CompileSchema(raw json.RawMessage) (*Schema, error) {
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, invalid("parameters", "is not valid JSON: "+err.Error())
	}
	if err := checkDoc(doc); err != nil {
		return nil, invalid("parameters", "invalid JSON Schema: "+err.Error())
	}
	root := new(jsonschema.Schema)
	if err := json.Unmarshal(raw, root); err != nil {
		return nil, invalid("parameters", "invalid JSON Schema: "+oneLine(err.Error()))
	}
	normalizeDraft(root)
	res, err := root.Resolve(&jsonschema.ResolveOptions{BaseURI: schemaURL, Loader: refuseLoader})
	if err != nil {
		return nil, invalid("parameters", "invalid JSON Schema: "+oneLine(err.Error()))
	}
	s := &Schema{root: root, resolved: res, patterns: map[string]*regexp.Regexp{}}
	if err := s.prepare(); err != nil {
		return nil, invalid("parameters", "invalid JSON Schema: "+err.Error())
	}
	return s, nil
}

// oneLine turns a library message into one line naming the document
// "parameters" rather than its in-memory URL.
func oneLine(msg string) string {
	msg = strings.ReplaceAll(msg, schemaURL, "parameters")
	return strings.Join(strings.Fields(msg), " ")
}

// Validate checks call arguments against the schema. Empty input and JSON
// null count as {}. The error wraps ErrArgs and names the JSON pointer of
// the first violation (smallest instance path), rooted at "arguments":
// "arguments/title: expected string, got number".
func (s *Schema) Validate(args json.RawMessage) error {
	if s == nil || s.resolved == nil {
		return fmt.Errorf("%w: no schema", ErrArgs)
	}
	v, err := decodeArgs(args)
	if err != nil {
		return err
	}
	err = s.resolved.Validate(v)
	if err == nil {
		return nil
	}
	vs := s.violations(s.root, v, "")
	if len(vs) == 0 {
		// A keyword the walk does not word (unevaluatedProperties,
		// $dynamicRef…): the library's own message.
		return fmt.Errorf("%w: arguments: %s", ErrArgs, oneLine(err.Error()))
	}
	return violationErr("arguments", vs)
}

// violationErr words the first violation of vs (and how many others).
func violationErr(root string, vs []violation) error {
	path, msg, others := firstViolation(vs)
	if others > 0 {
		msg += fmt.Sprintf(" (and %d more %s)", others, plural(others, "violation", "violations"))
	}
	return fmt.Errorf("%w: %s%s: %s", ErrArgs, root, path, msg)
}

// validateProperty checks the value of top-level argument key against the
// schema: its property schema when there is one (and every matching
// patternProperties schema); otherwise the key must be allowed (no
// "additionalProperties": false) and satisfy additionalProperties.
func (s *Schema) validateProperty(key string, raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	root := s.deref(s.root)
	at := "/" + escapePtr(key)
	var vs []violation
	matched := false
	if ps, ok := root.Properties[key]; ok {
		matched = true
		vs = append(vs, s.violations(ps, v, at)...)
	}
	for src, ps := range root.PatternProperties {
		if s.patterns[src].MatchString(key) {
			matched = true
			vs = append(vs, s.violations(ps, v, at)...)
		}
	}
	if !matched && root.AdditionalProperties != nil {
		if isFalse(root.AdditionalProperties) {
			return fmt.Errorf("%w: parameters do not allow argument %q (additionalProperties is false)", ErrArgs, key)
		}
		vs = s.violations(root.AdditionalProperties, v, at)
	}
	if len(vs) > 0 {
		return violationErr("arguments", vs)
	}
	return nil
}

// decodeArgs decodes call arguments, which must be a JSON object.
func decodeArgs(args json.RawMessage) (any, error) {
	a := bytes.TrimSpace(args)
	if len(a) == 0 || bytes.Equal(a, []byte("null")) {
		return map[string]any{}, nil
	}
	var v any
	if err := json.Unmarshal(a, &v); err != nil {
		return nil, fmt.Errorf("%w: arguments: not valid JSON: %v", ErrArgs, err)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("%w: arguments: must be a JSON object", ErrArgs)
	}
	return v, nil
}

// violation is one failed keyword: the JSON pointer of the instance value
// and what was wrong with it.
type violation struct{ path, msg string }

// firstViolation returns the instance path ("/a/b") and message of the
// first violation in vs, and how many lie elsewhere. The first violation
// is the one with the smallest path (deterministic whatever the walk's
// order); several messages at that path, as anyOf branches give, are
// joined with " or ".
func firstViolation(vs []violation) (path, msg string, others int) {
	if len(vs) == 0 {
		return "", "invalid", 0
	}
	vs = slices.Clone(vs)
	slices.SortFunc(vs, func(a, b violation) int {
		return cmp.Or(cmp.Compare(a.path, b.path), cmp.Compare(a.msg, b.msg))
	})
	path = vs[0].path
	var msgs []string
	for _, l := range vs {
		if l.path != path {
			others++
		} else if !slices.Contains(msgs, l.msg) {
			msgs = append(msgs, l.msg)
		}
	}
	return path, strings.Join(msgs, " or "), others
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

var ptrEscaper = strings.NewReplacer("~", "~0", "/", "~1")

func escapePtr(t string) string { return ptrEscaper.Replace(t) }

// ApplyArgs merges opts.Args into call arguments: each Defaults key the
// caller did not send (a key sent as null counts as sent) is added, and
// each Fixed key replaces whatever the caller sent. Empty input and null
// count as {}; anything else but a JSON object is an ErrArgs error. The
// output is compact JSON with object keys sorted at every level, so equal
// inputs give byte-equal outputs. Numbers keep their exact text.
func ApplyArgs(opts Options, args json.RawMessage) (json.RawMessage, error) {
	m := map[string]any{}
	if a := bytes.TrimSpace(args); len(a) > 0 && !bytes.Equal(a, []byte("null")) {
		v, err := decodeNumber(a)
		if err != nil {
			return nil, fmt.Errorf("%w: arguments: not valid JSON: %v", ErrArgs, err)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: arguments: must be a JSON object", ErrArgs)
		}
		m = obj
	}
	for k, raw := range opts.Args.Defaults {
		if _, ok := m[k]; ok {
			continue
		}
		v, err := decodeNumber(raw)
		if err != nil {
			return nil, invalid("options.args.defaults."+k, "is not valid JSON")
		}
		m[k] = v
	}
	for k, raw := range opts.Args.Fixed {
		v, err := decodeNumber(raw)
		if err != nil {
			return nil, invalid("options.args.fixed."+k, "is not valid JSON")
		}
		m[k] = v
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%w: arguments: %v", ErrArgs, err)
	}
	return out, nil
}

// decodeNumber decodes one JSON value keeping numbers as json.Number and
// refusing trailing data.
func decodeNumber(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}
