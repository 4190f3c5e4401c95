package db_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/utpmesh/utpmesh/services/cynode/db"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
)

// FuzzCheckValue feeds arbitrary value and value_type arguments to
// CheckValue: it accepts a value of the type or answers invalid_argument,
// never a panic; what it accepts is JSON of that type.
func FuzzCheckValue(f *testing.F) {
	for _, s := range [][2]string{{`"x"`, "string"}, {`1.5`, "integer"}, {`1e400`, "number"}, {`9223372036854775808`, "integer"},
		{`{"a":`, "json"}, {`true`, "boolean"}, {``, "json"}, {`[1,2]`, "decimal"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, value, typ string) {
		v, err := db.CheckValue(json.RawMessage(value), typ)
		if err != nil {
			var ge *gateway.Error
			if !errors.As(err, &ge) || ge.Type != gateway.TypeInvalidArgument || ge.Message == "" {
				t.Fatalf("CheckValue(%q, %q): %v; want invalid_argument", value, typ, err)
			}
			return
		}
		ok := true
		switch typ {
		case "string":
			_, ok = v.(string)
		case "number":
			_, ok = v.(float64)
		case "integer":
			f, isNum := v.(float64)
			ok = isNum && f == float64(int64(f))
		case "boolean":
			_, ok = v.(bool)
		case "json":
		default:
			ok = false
		}
		if !ok {
			t.Fatalf("CheckValue(%q, %q) accepted %#v", value, typ, v)
		}
		if _, err := json.Marshal(v); err != nil {
			t.Fatalf("CheckValue(%q, %q) accepted %#v that does not encode: %v", value, typ, v, err)
		}
	})
}
