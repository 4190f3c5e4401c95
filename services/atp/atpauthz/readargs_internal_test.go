package atpauthz

import (
	"encoding/json"
	"testing"
)

// TestReadArgs: the top-level booking_object_id and hem_id are read, also
// when a key is spelled with an escape; arguments without them, nested
// ones and non-strings read as none.
func TestReadArgs(t *testing.T) {
	cases := []struct {
		name, raw string
		want      callArgs
	}{
		{"none", `{"text":"hi"}`, callArgs{}},
		{"empty", ``, callArgs{}},
		{"not an object", `[1,2]`, callArgs{}},
		{"both", `{"booking_object_id":"b-1","hem_id":"h-1"}`, callArgs{BookingObjectID: "b-1", HEMID: "h-1"}},
		{"escaped key", `{"booking\u005fobject_id":"b-2"}`, callArgs{BookingObjectID: "b-2"}},
		{"nested only", `{"x":{"booking_object_id":"b-3"}}`, callArgs{}},
		{"a value, not a key", `{"text":"booking_object_id"}`, callArgs{}},
		{"not a string", `{"hem_id":5}`, callArgs{}},
		{"malformed", `{"hem_id":`, callArgs{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := readArgs(json.RawMessage(tc.raw)); got != tc.want {
				t.Fatalf("readArgs(%s) = %+v, want %+v", tc.raw, got, tc.want)
			}
		})
	}
}
