package registry_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/registry"
)

const docSchema = `{
  "type": "object",
  "properties": {
    "title": {"type": "string", "minLength": 1},
    "count": {"type": "integer", "minimum": 0},
    "tags":  {"type": "array", "items": {"type": "string"}},
    "meta":  {"type": "object", "properties": {"a/b": {"type": "boolean"}}},
    "kind":  {"enum": ["memo", "report"]}
  },
  "required": ["title"],
  "additionalProperties": false
}`

func TestSchemaValidate(t *testing.T) {
	s, err := registry.CompileSchema(json.RawMessage(docSchema))
	if err != nil {
		t.Fatalf("CompileSchema: %v", err)
	}
	for _, tc := range []struct {
		args string
		want string // "" = valid; else substring of the error
	}{
		{`{"title":"x"}`, ""},
		{`{"title":"x","count":3,"tags":["a"],"meta":{"a/b":true},"kind":"memo"}`, ""},
		{`{"title":"x","count":1.0}`, ""},
		{`{"title":5}`, "arguments/title: expected string, got number"},
		{`{}`, "arguments: missing required property title"},
		{``, "arguments: missing required property title"},
		{`null`, "arguments: missing required property title"},
		{`{"title":""}`, "arguments/title: "},
		{`{"title":"x","count":-1}`, "arguments/count: "},
		{`{"title":"x","count":1.5}`, "arguments/count: expected integer, got number"},
		{`{"title":"x","tags":["a",2]}`, "arguments/tags/1: expected string, got number"},
		{`{"title":"x","meta":{"a/b":"yes"}}`, "arguments/meta/a~1b: expected boolean, got string"},
		{`{"title":"x","kind":"poem"}`, "arguments/kind: "},
		{`{"title":"x","extra":1}`, "arguments: "},
		{`{"title":1,"count":"2"}`, "arguments/count: expected integer, got string (and 1 more violation)"},
		{`[1]`, "arguments: must be a JSON object"},
		{`"x"`, "arguments: must be a JSON object"},
		{`{"title":`, "arguments: not valid JSON"},
		{`{"title":"x","extra":1,"more":2}`, `arguments: additional properties "extra", "more" not allowed`},
		{`{"title":"x","kind":"poem"}`, `arguments/kind: value must be one of "memo", "report"`},
		{`{"title":""}`, "arguments/title: must be at least 1 character long, got 0"},
		{`{"title":"x","count":-1}`, "arguments/count: must be >= 0, got -1"},
	} {
		err := s.Validate(json.RawMessage(tc.args))
		if tc.want == "" {
			if err != nil {
				t.Errorf("Validate(%s) = %v, want nil", tc.args, err)
			}
			continue
		}
		if !errors.Is(err, registry.ErrArgs) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%s) = %v, want ErrArgs containing %q", tc.args, err, tc.want)
		}
	}
	var nilSchema *registry.Schema
	if err := nilSchema.Validate(nil); !errors.Is(err, registry.ErrArgs) {
		t.Errorf("nil schema: %v", err)
	}
}

func TestCompileSchemaErrors(t *testing.T) {
	for schema, want := range map[string]string{
		`{`:                                    "not valid JSON",
		`{"type":"object","minProperties":-1}`: "/minProperties",
		`{"type":"object","$ref":"https://example.com/s.json"}`:           "external reference",
		`{"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}}`: "parameters",
		`{"type":"object","required":"title"}`:                            "/required",
		`{"$ref":"#"}`:                                                    "$ref cycle",
		`{"type":"objec"}`:                                                "at /type: must be one of",
		`{"$schema":"http://json-schema.org/draft-04/schema#"}`:           "unsupported draft",
		`{"properties":{"a":{"pattern":"("}}}`:                            "pattern",
		`{"properties":{"a":{"$ref":"other.json"}}}`:                      "external reference",
	} {
		_, err := registry.CompileSchema(json.RawMessage(schema))
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("CompileSchema(%s) = %v, want ErrInvalid containing %q", schema, err, want)
		}
	}
}

func TestApplyArgs(t *testing.T) {
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	opts := registry.Options{Args: registry.Args{
		Defaults: map[string]json.RawMessage{"times": raw(`1`), "lang": raw(`"en"`)},
		Fixed:    map[string]json.RawMessage{"mode": raw(`"safe"`), "big": raw(`12345678901234567890`)},
	}}
	for _, tc := range []struct {
		name string
		opts registry.Options
		args string
		want string
		err  error
	}{
		{"no options", registry.Options{}, `{"b":1,"a":{"z":1,"y":2}}`, `{"a":{"y":2,"z":1},"b":1}`, nil},
		{"empty args", registry.Options{}, ``, `{}`, nil},
		{"null args", opts, `null`, `{"big":12345678901234567890,"lang":"en","mode":"safe","times":1}`, nil},
		{"defaults fill", opts, `{"text":"hi"}`, `{"big":12345678901234567890,"lang":"en","mode":"safe","text":"hi","times":1}`, nil},
		{"caller keeps own", opts, `{"times":3,"lang":null}`, `{"big":12345678901234567890,"lang":null,"mode":"safe","times":3}`, nil},
		{"fixed overrides", opts, `{"mode":"unsafe","big":1}`, `{"big":12345678901234567890,"lang":"en","mode":"safe","times":1}`, nil},
		{"numbers exact", registry.Options{}, `{"x":1.000000000000000000001,"y":1e400}`, `{"x":1.000000000000000000001,"y":1e400}`, nil},
		{"not object", opts, `[1]`, ``, registry.ErrArgs},
		{"bad JSON", opts, `{"a":`, ``, registry.ErrArgs},
		{"trailing data", opts, `{"a":1}}`, ``, registry.ErrArgs},
		{"bad default", registry.Options{Args: registry.Args{Defaults: map[string]json.RawMessage{"a": raw(`{`)}}}, `{}`, ``, registry.ErrInvalid},
		{"bad fixed", registry.Options{Args: registry.Args{Fixed: map[string]json.RawMessage{"a": raw(`}`)}}}, `{}`, ``, registry.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := registry.ApplyArgs(tc.opts, json.RawMessage(tc.args))
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("ApplyArgs = %s, %v; want %s", got, err, tc.want)
			}
			again, _ := registry.ApplyArgs(tc.opts, json.RawMessage(tc.args))
			if string(again) != string(got) {
				t.Errorf("not deterministic: %s vs %s", again, got)
			}
		})
	}
}

// TestSchemaKeywords: the words of a refusal for the keywords the walk
// covers, each naming the instance path of the violation.
func TestSchemaKeywords(t *testing.T) {
	for _, tc := range []struct {
		name, schema, args, want string // want "" = valid
	}{
		{"anyOf both named", `{"type":"object","properties":{"a":{"anyOf":[{"type":"string"},{"type":"integer"}]}}}`, `{"a":true}`, "arguments/a: expected integer, got boolean or expected string, got boolean"},
		{"anyOf ok", `{"type":"object","properties":{"a":{"anyOf":[{"type":"string"},{"type":"integer"}]}}}`, `{"a":3}`, ""},
		{"oneOf two", `{"type":"object","properties":{"a":{"oneOf":[{"type":"number"},{"type":"integer"}]}}}`, `{"a":3}`, "arguments/a: must match exactly one oneOf branch, matches 0 and 1"},
		{"local ref", `{"type":"object","$defs":{"id":{"type":"string","pattern":"^[a-z]+$"}},"properties":{"id":{"$ref":"#/$defs/id"}}}`, `{"id":"A1"}`, `arguments/id: does not match pattern "^[a-z]+$"`},
		{"recursive ref", `{"type":"object","properties":{"n":{"type":"integer"},"next":{"$ref":"#"}}}`, `{"next":{"next":{"n":"x"}}}`, "arguments/next/next/n: expected integer, got string"},
		{"not", `{"type":"object","properties":{"a":{"not":{"const":0}}}}`, `{"a":0}`, `arguments/a: must not match the "not" schema`},
		{"if then", `{"type":"object","if":{"required":["a"]},"then":{"required":["b"]}}`, `{"a":1}`, "arguments: missing required property b"},
		{"unique", `{"type":"object","properties":{"a":{"uniqueItems":true}}}`, `{"a":[1,2,1]}`, "arguments/a: items must be unique, but 0 and 2 are equal"},
		{"maxItems", `{"type":"object","properties":{"a":{"maxItems":1}}}`, `{"a":[1,2]}`, "arguments/a: must have at most 1 item, got 2"},
		{"false property", `{"type":"object","properties":{"a":false}}`, `{"a":1}`, "arguments/a: not allowed (the schema is false)"},
		{"draft-07 tuple", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"p":{"items":[{"type":"string"}],"additionalItems":false}}}`, `{"p":["a",1]}`, "arguments/p: must have at most 1 item, got 2"},
		{"dependentRequired", `{"type":"object","dependentRequired":{"a":["b","c"]}}`, `{"a":1}`, "arguments: property a requires properties b, c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := registry.CompileSchema(json.RawMessage(tc.schema))
			if err != nil {
				t.Fatalf("CompileSchema: %v", err)
			}
			err = s.Validate(json.RawMessage(tc.args))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate(%s) = %v, want nil", tc.args, err)
				}
				return
			}
			if !errors.Is(err, registry.ErrArgs) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate(%s) = %v, want ErrArgs containing %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestSchemaDraftSpellings: the usual spellings of the two supported
// drafts compile as that draft (draft-07's array "items" is a tuple,
// 2020-12's "prefixItems" is), and the drafts the registry no longer
// validates are refused saying what to write instead.
func TestSchemaDraftSpellings(t *testing.T) {
	const (
		tuple07   = `"type":"object","properties":{"p":{"items":[{"type":"string"}],"additionalItems":false}}`
		tuple2020 = `"type":"object","properties":{"p":{"prefixItems":[{"type":"string"}],"items":false}}`
	)
	for _, tc := range []struct {
		schema string // $schema value
		body   string
		want   string // "" = compiles with the draft's meaning; else the refusal
	}{
		{"http://json-schema.org/draft-07/schema#", tuple07, ""},
		{"http://json-schema.org/draft-07/schema", tuple07, ""},
		{"https://json-schema.org/draft-07/schema#", tuple07, ""},
		{"https://json-schema.org/draft-07/schema", tuple07, ""},
		{"https://json-schema.org/draft/2020-12/schema", tuple2020, ""},
		{"https://json-schema.org/draft/2020-12/schema#", tuple2020, ""},
		{"http://json-schema.org/draft/2020-12/schema", tuple2020, `unsupported spelling "http://json-schema.org/draft/2020-12/schema": write "https://json-schema.org/draft/2020-12/schema"`},
		{"http://json-schema.org/draft-04/schema#", tuple07, `unsupported draft "http://json-schema.org/draft-04/schema#": draft-04, no longer validated: write "$schema": "http://json-schema.org/draft-07/schema#"`},
		{"http://json-schema.org/draft-06/schema#", tuple07, `draft-06, no longer validated: write "$schema": "http://json-schema.org/draft-07/schema#"`},
		{"http://json-schema.org/draft-03/schema#", tuple07, "draft-03, no longer validated"},
		{"https://json-schema.org/draft/2019-09/schema", tuple2020, `draft 2019-09, no longer validated: write "$schema": "https://json-schema.org/draft/2020-12/schema" or omit it`},
		{"https://example.com/my-meta-schema", tuple2020, `unsupported draft "https://example.com/my-meta-schema"`},
	} {
		t.Run(tc.schema, func(t *testing.T) {
			s, err := registry.CompileSchema(json.RawMessage(`{"$schema":"` + tc.schema + `",` + tc.body + `}`))
			if tc.want != "" {
				if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "at /$schema: ") || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("CompileSchema = %v, want ErrInvalid at /$schema containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("CompileSchema: %v", err)
			}
			if err := s.Validate(json.RawMessage(`{"p":["a"]}`)); err != nil {
				t.Errorf(`Validate({"p":["a"]}) = %v, want nil`, err)
			}
			if err := s.Validate(json.RawMessage(`{"p":["a",1]}`)); !errors.Is(err, registry.ErrArgs) || !strings.Contains(err.Error(), "arguments/p: must have at most 1 item, got 2") {
				t.Errorf(`Validate({"p":["a",1]}) = %v, want the tuple's length refused`, err)
			}
		})
	}
}
