package card

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzDecode checks that Decode never panics and that every card it accepts
// has a stable canonical encoding that decodes to the same card.
func FuzzDecode(f *testing.F) {
	good, _ := Encode(callCard())
	f.Add(good)
	res, _ := Encode(resultCard(`{"status":"failed","after_execution":"suspend","error":{"code":"bad_request","message":"m"}}`))
	f.Add(res)
	f.Add([]byte(`{"card_id":"01890a5d-ac96-774b-bcce-b302099a8057","project_id":"p","type":"x","content":null,"metadata":{"k":1},"created_at":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"metadata":[]}`))
	// Invalid UTF-8 in a metadata field, a content string and a key.
	f.Add(bytes.Replace(good, []byte(`"a1"`), []byte("\"a\xff1\""), 1))
	f.Add(bytes.Replace(good, []byte(`"echo"`), []byte("\"ech\xc3\""), 1))
	f.Add(bytes.Replace(good, []byte(`"x"`), []byte("\"\xfex\""), 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := CheckUTF8("f", data); (err == nil) != utf8.Valid(data) {
			t.Fatalf("CheckUTF8 = %v on %q, valid UTF-8 %v", err, data, utf8.Valid(data))
		}
		c, err := Decode(data)
		if err != nil {
			return
		}
		if !utf8.Valid(data) {
			t.Fatalf("Decode accepted invalid UTF-8: %q", data)
		}
		enc, err := Encode(c)
		if err != nil {
			t.Fatalf("Encode of a decoded card: %v", err)
		}
		c2, err := Decode(enc)
		if err != nil {
			t.Fatalf("canonical encoding does not decode: %v\n%s", err, enc)
		}
		enc2, err := Encode(c2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("canonical encoding not stable:\n%s\n%s", enc, enc2)
		}
	})
}

// fastSeeds are inputs for FuzzFastDecode and TestFastDecode: canonical
// cards and contents, and the shapes the fast decoders must hand over to
// encoding/json (case-folded keys, duplicates, escapes, nulls, wrong types).
var fastSeeds = []string{
	`{"card_id":"01890a5d-ac96-774b-bcce-b302099a8057","project_id":"p","type":"x","content":null,"metadata":{"k":1},"created_at":"2026-01-01T00:00:00Z"}`,
	`{"card_id":"a","Card_ID":"b"}`,
	`{"card_id":"a","card_id":"b"}`,
	`{"type":null,"content":null,"metadata":null,"created_at":null}`,
	`{"card_id":"caf\u00e9","type":"\u0074ool.call","author_id":"\ud83d\ude00","tool_call_id":"a\"b"}`,
	`{"card_id":"\xff\xfe","project_id":"é"}`,
	`{"card_id":5}`,
	`{"created_at":"2026-01-01T00:00:00+01:00","content":[1,2.5e-3,true,false,null,{"a":{}}]}`,
	`{"created_at":"2026-01-01T00:00:00.123456789-07:30"}`,
	`{"created_at":"2026-13-01T00:00:00Z"}`,
	`{"metadata":{"agent_id":"a","AGENT_ID":"b","x":1}}`,
	`{"metadata":{"turn_epoch":1.0}}`,
	`{"metadata":{"turn_epoch":-0,"x":null,"y":"\u0000","ſtep_id":"s"}}`,
	`{"metadata":{"turn_epoch":99999999999999999999}}`,
	`{"metadata":{"x":1,"x":2}}`,
	`{"metadata":{"agent\u005fid":"a"}}`,
	`{"unknown":{"deep":[[[]]]},"type":"t"} `,
	`{"card_id":"a"} x`,
	`{"tool_name":"echo","arguments":{"x":1},"target_subject":"cg.v1r3.p.c.cmd.tool.echo"}`,
	`{"tool_name":"echo","arguments":null,"Tool_Name":"x"}`,
	`{"tool_name":null}`,
	`{"status":"success","after_execution":"suspend","result":{"ok":true}}`,
	`{"status":"failed","after_execution":"terminate","error":{"code":"bad_request","message":"m","detail":[1]}}`,
	`{"status":"succ\u0065ss","error":null,"extra":"e"}`,
	`{"error":{"code":"a"},"error":{"message":"b"}}`,
	`{"error":{"code":"a","Code":"b"}}`,
	`[]`, `null`, `{}`, `{"a":}`, `{"a":1,}`, `"x"`, ``,
}

// equalCards compares two cards, created_at by instant and rendering (the
// *time.Location of a fixed zone is a new pointer on every parse).
func equalCards(a, b Card) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) || a.CreatedAt.String() != b.CreatedAt.String() {
		return false
	}
	a.CreatedAt, b.CreatedAt = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

// checkFast fails t when a fast decoder accepts data and encoding/json
// refuses it or decodes it differently.
func checkFast(t *testing.T, data []byte) {
	t.Helper()
	var fast Card
	if parseCard(data, &fast) {
		var ref Card
		if err := json.Unmarshal(data, (*cardJSON)(&ref)); err != nil {
			t.Fatalf("fast card decoder accepts what encoding/json refuses (%v): %q", err, data)
		}
		if !equalCards(fast, ref) {
			t.Fatalf("card decoders differ on %q:\nfast %#v\nref  %#v", data, fast, ref)
		}
	}
	r := reader{data: data}
	if md, ok := parseMetadata(&r, ""); ok && r.end() {
		var ref Metadata
		if err := ref.unmarshalTwoPass(data); err != nil {
			t.Fatalf("fast metadata decoder accepts what encoding/json refuses (%v): %q", err, data)
		}
		if !reflect.DeepEqual(md, ref) {
			t.Fatalf("metadata decoders differ on %q:\nfast %#v\nref  %#v", data, md, ref)
		}
	}
	if tc, ok := parseToolCall(data); ok {
		var ref ToolCallContent
		if err := json.Unmarshal(data, &ref); err != nil || !reflect.DeepEqual(tc, ref) {
			t.Fatalf("tool.call decoders differ on %q (%v):\nfast %#v\nref  %#v", data, err, tc, ref)
		}
	}
	if tr, ok := parseToolResult(data); ok {
		var ref ToolResultContent
		if err := json.Unmarshal(data, &ref); err != nil || !reflect.DeepEqual(tr, ref) {
			t.Fatalf("tool.result decoders differ on %q (%v):\nfast %#v\nref  %#v", data, err, tr, ref)
		}
	}
	r = reader{data: data}
	if _, _, ok := r.value(0); ok && r.end() && !json.Valid(data) {
		t.Fatalf("reader accepts invalid JSON %q", data)
	}
}

// FuzzFastDecode checks the one-pass decoders (decode.go) against
// encoding/json: whatever a fast decoder accepts, encoding/json decodes to
// the same value.
func FuzzFastDecode(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s))
	}
	for _, c := range []*Card{callCard(), resultCard(`{"status":"failed","after_execution":"suspend","error":{"code":"bad_request","message":"m"}}`)} {
		enc, _ := Encode(c)
		f.Add(enc)
		f.Add([]byte(c.Content))
	}
	f.Fuzz(checkFast)
}
