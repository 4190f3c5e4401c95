package card

import (
	"bytes"
	"testing"
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
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Decode(data)
		if err != nil {
			return
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
