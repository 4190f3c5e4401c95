package toolkit_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// mapRecords is an in-memory toolkit.Records.
type mapRecords map[string][]byte

func (m mapRecords) Get(k string) ([]byte, bool, error) { v, ok := m[k]; return v, ok, nil }
func (m mapRecords) Put(k string, v []byte) error       { m[k] = v; return nil }

var _ toolkit.Records = mapRecords(nil)

func TestCallRecords(t *testing.T) {
	r := mapRecords{}
	if rec, err := toolkit.GetCall(r, "turn-1", "call-1"); rec != nil || err != nil {
		t.Fatalf("empty: %v %v", rec, err)
	}
	hash := toolkit.ArgsHash(json.RawMessage(`{"a": 1}`))
	if hash != toolkit.ArgsHash(json.RawMessage(`{"a":1}`)) {
		t.Fatal("whitespace changes the hash")
	}
	want := toolkit.CallRecord{ToolName: "MAKE", ArgsHash: hash, Result: json.RawMessage(`{"id":"x"}`), Receipt: json.RawMessage(`{"kind":"call"}`)}
	if err := toolkit.PutCall(r, "turn-1", "call-1", want); err != nil {
		t.Fatal(err)
	}
	got, err := toolkit.GetCall(r, "turn-1", "call-1")
	if err != nil || got == nil || string(got.Result) != `{"id":"x"}` || string(got.Receipt) != `{"kind":"call"}` {
		t.Fatalf("%+v %v", got, err)
	}
	for _, tc := range []struct {
		name, tool, hash string
		ok               bool
	}{
		{"same call", "MAKE", hash, true},
		{"other arguments", "MAKE", toolkit.ArgsHash(json.RawMessage(`{"a":2}`)), false},
		{"other tool", "DROP", hash, false},
	} {
		err := got.Replay(tc.tool, tc.hash, "turn-1", "call-1")
		var ce *card.Error
		if tc.ok != (err == nil) || (!tc.ok && (!errors.As(err, &ce) || ce.Code != card.CodeBadRequest || !strings.Contains(ce.Message, `tool_call_id "call-1"`))) {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	r[toolkit.CallKey("turn-1", "call-2")] = []byte("{")
	if _, err := toolkit.GetCall(r, "turn-1", "call-2"); !errors.Is(err, toolkit.ErrRecord) {
		t.Fatalf("corrupt record: %v", err)
	}
}

func TestPutNew(t *testing.T) {
	r := mapRecords{}
	for _, tc := range []struct {
		name    string
		v       any
		existed bool
		bad     bool
	}{
		{"first", map[string]int{"n": 1}, false, false},
		{"replay", map[string]int{"n": 1}, true, false},
		{"reuse with other content", map[string]int{"n": 2}, false, true},
	} {
		existed, err := toolkit.PutNew(r, "obj_1", tc.v, "call-1")
		var ce *card.Error
		if existed != tc.existed || tc.bad != (err != nil) || (tc.bad && (!errors.As(err, &ce) || ce.Code != card.CodeBadRequest)) {
			t.Fatalf("%s: existed %v err %v", tc.name, existed, err)
		}
	}
	var got map[string]int
	if found, err := toolkit.GetJSON(r, "obj_1", &got); !found || err != nil || got["n"] != 1 {
		t.Fatalf("%v %v %v", found, err, got)
	}
	if err := toolkit.PutJSON(r, "obj_2", got); err != nil {
		t.Fatal(err)
	}
	if found, _ := toolkit.GetJSON(r, "absent", &got); found {
		t.Fatal("absent found")
	}
	if toolkit.Raw(func() {}) != nil {
		t.Fatal("Raw of a func")
	}
}
