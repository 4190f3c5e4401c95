package registry

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// schemaURL is the in-memory location parameters schemas are compiled at.
const schemaURL = "mem:///registry/parameters.json"

var printer = message.NewPrinter(language.English)

// Schema is a compiled parameters schema. It is immutable and safe for
// concurrent use; compile once per entry and reuse it for every call.
type Schema struct {
	s *jsonschema.Schema
}

// noLoader refuses every external reference: a parameters schema must be
// self-contained ($ref only within the document or to the standard
// metaschemas). This keeps the registry from reading files or the network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external reference %q not allowed (parameters must be self-contained)", url)
}

// CompileSchema compiles a JSON Schema (draft 2020-12 unless its $schema
// names another supported draft). External $ref targets are refused. The
// error is a *FieldError for field "parameters" naming the schema problem.
// CompileSchema does not require "type":"object"; Validate does.
func CompileSchema(raw json.RawMessage) (*Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, invalid("parameters", "is not valid JSON: "+err.Error())
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, invalid("parameters", err.Error())
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, invalid("parameters", "invalid JSON Schema: "+compileMsg(err))
	}
	return &Schema{s: s}, nil
}

// compileMsg turns a compiler error into one line.
func compileMsg(err error) string {
	var sve *jsonschema.SchemaValidationError
	if errors.As(err, &sve) {
		var ve *jsonschema.ValidationError
		if errors.As(sve.Err, &ve) {
			path, msg, _ := firstViolation(ve)
			if path == "" {
				path = "(root)"
			}
			return "at " + path + ": " + msg
		}
	}
	msg := strings.ReplaceAll(err.Error(), schemaURL, "parameters")
	return strings.Join(strings.Fields(msg), " ")
}

// Validate checks call arguments against the schema. Empty input and JSON
// null count as {}. The error wraps ErrArgs and names the JSON pointer of
// the first violation (smallest instance path), rooted at "arguments":
// "arguments/title: got number, want string".
func (s *Schema) Validate(args json.RawMessage) error {
	if s == nil || s.s == nil {
		return fmt.Errorf("%w: no schema", ErrArgs)
	}
	v, err := decodeArgs(args)
	if err != nil {
		return err
	}
	return s.validateValue("arguments", v)
}

func (s *Schema) validateValue(root string, v any) error {
	err := s.s.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return fmt.Errorf("%w: %s: %v", ErrArgs, root, err)
	}
	path, msg, others := firstViolation(ve)
	if others > 0 {
		msg += fmt.Sprintf(" (and %d more %s)", others, plural(others, "violation", "violations"))
	}
	return fmt.Errorf("%w: %s%s: %s", ErrArgs, root, path, msg)
}

// validateProperty checks the value of top-level argument key against the
// schema: its property schema when there is one; otherwise the key must be
// allowed (no "additionalProperties": false without a matching pattern).
func (s *Schema) validateProperty(key string, raw json.RawMessage) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	if ps, ok := s.s.Properties[key]; ok {
		return (&Schema{s: ps}).validateValue("arguments/"+escapePtr(key), v)
	}
	for re := range s.s.PatternProperties {
		if re.MatchString(key) {
			return nil
		}
	}
	if b, ok := s.s.AdditionalProperties.(bool); ok && !b {
		return fmt.Errorf("%w: parameters do not allow argument %q (additionalProperties is false)", ErrArgs, key)
	}
	if as, ok := s.s.AdditionalProperties.(*jsonschema.Schema); ok {
		return (&Schema{s: as}).validateValue("arguments/"+escapePtr(key), v)
	}
	return nil
}

// decodeArgs decodes call arguments, which must be a JSON object.
func decodeArgs(args json.RawMessage) (any, error) {
	a := bytes.TrimSpace(args)
	if len(a) == 0 || bytes.Equal(a, []byte("null")) {
		return map[string]any{}, nil
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(a))
	if err != nil {
		return nil, fmt.Errorf("%w: arguments: not valid JSON: %v", ErrArgs, err)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("%w: arguments: must be a JSON object", ErrArgs)
	}
	return v, nil
}

// firstViolation returns the instance path ("/a/b") and message of the
// first violation in ve, and how many leaf errors lie elsewhere. The first
// violation is the one with the smallest path (deterministic whatever the
// validator's order); several messages at that path, as anyOf branches
// give, are joined with " or ".
func firstViolation(ve *jsonschema.ValidationError) (path, msg string, others int) {
	type leaf struct{ path, msg string }
	var leaves []leaf
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, leaf{pointer(e.InstanceLocation), kindMsg(e.ErrorKind)})
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	if len(leaves) == 0 {
		return "", "invalid", 0
	}
	slices.SortFunc(leaves, func(a, b leaf) int {
		return cmp.Or(cmp.Compare(a.path, b.path), cmp.Compare(a.msg, b.msg))
	})
	path = leaves[0].path
	var msgs []string
	for _, l := range leaves {
		if l.path != path {
			others++
		} else if !slices.Contains(msgs, l.msg) {
			msgs = append(msgs, l.msg)
		}
	}
	return path, strings.Join(msgs, " or "), others
}

// kindMsg words an error kind; a few common kinds get clearer wording.
func kindMsg(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Type:
		return fmt.Sprintf("expected %s, got %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Required:
		return "missing required " + plural(len(k.Missing), "property", "properties") + " " + strings.Join(k.Missing, ", ")
	case nil:
		return "invalid"
	}
	return k.LocalizedString(printer)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// pointer renders instance location tokens as a JSON pointer.
func pointer(toks []string) string {
	var b strings.Builder
	for _, t := range toks {
		b.WriteByte('/')
		b.WriteString(escapePtr(t))
	}
	return b.String()
}

func escapePtr(t string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(t)
}

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
