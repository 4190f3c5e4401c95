package registry_test

import (
	"encoding/json"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/registry"
)

// FuzzCompileSchema: any bytes given as a tool's parameters schema either
// compile or are refused with an error, never a panic; a compiled schema
// judges any arguments without a panic, and a refusal says something.
func FuzzCompileSchema(f *testing.F) {
	for _, s := range []string{
		`{"type":"object"}`,
		`{"type":"object","properties":{"n":{"type":"integer","minimum":0}},"required":["n"]}`,
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","$defs":{"a":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/a"}}}`,
		`{"$ref":"#"}`,
		`{"type":"object","patternProperties":{"^x":{"type":"boolean"}},"additionalProperties":false}`,
		`{"type":["object","null"],"minProperties":-1}`,
		`[]`, `null`, `{`,
	} {
		f.Add([]byte(s), []byte(`{"n":1,"a":"b","x1":true}`))
	}
	f.Fuzz(func(t *testing.T, schema, args []byte) {
		s, err := registry.CompileSchema(json.RawMessage(schema))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("a refused schema with an empty message")
			}
			return
		}
		if err := s.Validate(json.RawMessage(args)); err != nil && err.Error() == "" {
			t.Fatal("refused arguments with an empty message")
		}
	})
}
