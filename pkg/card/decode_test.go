package card

import (
	"encoding/json"
	"testing"
)

// TestFastDecodeCanonical: the canonical encodings the CardStore keeps take
// the one-pass path (else reading a turn costs encoding/json again), and
// decode to the card that was encoded.
func TestFastDecodeCanonical(t *testing.T) {
	withExtra := callCard()
	withExtra.Metadata.Extra = map[string]json.RawMessage{"mandate": json.RawMessage(`"tok"`), "z": json.RawMessage(`{"k":[1,2]}`)}
	withExtra.Metadata.TraceID, withExtra.Metadata.Role, withExtra.AuthorID = "0af7651916cd43dd8448eb211c80319c", "assistant", "agent-1"
	thought := &Card{CardID: callCard().CardID, ProjectID: "p", Type: TypeAgentThought, CreatedAt: t0}
	failed := resultCard(`{"status":"failed","after_execution":"suspend","result":{"error_code":"bad_request"},"error":{"code":"bad_request","message":"arguments/x: \"é\" expected string","detail":{"at":"/x"}}}`)
	tests := []struct {
		name string
		card *Card
	}{
		{"tool.call", callCard()},
		{"tool.call with mandate and extras", withExtra},
		{"tool.result, failed", failed},
		{"tool.result, success", resultCard(`{"status":"success","after_execution":"terminate","result":{"ok":true}}`)},
		{"thought with null content", thought},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			enc, err := Encode(tt.card)
			if err != nil {
				t.Fatal(err)
			}
			var got Card
			if !parseCard(enc, &got) {
				t.Fatalf("canonical card went to encoding/json: %s", enc)
			}
			again, err := Encode(&got)
			if err != nil || string(again) != string(enc) {
				t.Fatalf("fast decode does not round-trip (%v):\n%s\n%s", err, enc, again)
			}
			switch got.Type {
			case TypeToolCall:
				if _, ok := parseToolCall(got.Content); !ok {
					t.Fatalf("tool.call content went to encoding/json: %s", got.Content)
				}
			case TypeToolResult:
				if _, ok := parseToolResult(got.Content); !ok {
					t.Fatalf("tool.result content went to encoding/json: %s", got.Content)
				}
			}
			checkFast(t, enc)
			checkFast(t, got.Content)
		})
	}
}

// TestFastDecodeFallback: input the one-pass decoders do not reproduce
// goes to encoding/json, and the public methods give encoding/json's
// result either way.
func TestFastDecodeFallback(t *testing.T) {
	tests := []struct {
		name, in string
		fast     bool // parseCard takes it
		wantID   string
		wantErr  bool
	}{
		{"plain", `{"card_id":"a"}`, true, "a", false},
		{"escapes", `{"card_id":"caf\u00e9\n"}`, true, "café\n", false},
		{"invalid UTF-8 becomes U+FFFD", "{\"card_id\":\"a\xffb\"}", true, "a\ufffdb", false},
		{"unknown key skipped", `{"x":{"card_id":"no"},"card_id":"a"}`, true, "a", false},
		{"null card", `null`, true, "", false},
		{"key in another case", `{"Card_ID":"a"}`, false, "a", false},
		{"duplicate key: last wins", `{"card_id":"a","card_id":"b"}`, false, "b", false},
		{"null string keeps the value", `{"card_id":"a","card_id":null}`, false, "a", false},
		{"escaped key", `{"card\u005fid":"a"}`, false, "a", false},
		{"wrong type", `{"card_id":1}`, false, "", true},
		{"bad time", `{"created_at":"yesterday"}`, false, "", true},
		{"trailing comma", `{"card_id":"a",}`, false, "", true},
		{"trailing data", `{"card_id":"a"} {}`, false, "", true},
		{"not an object", `[]`, false, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var probe Card
			if got := parseCard([]byte(tt.in), &probe); got != tt.fast {
				t.Errorf("parseCard took the fast path = %v, want %v", got, tt.fast)
			}
			var c Card
			err := json.Unmarshal([]byte(tt.in), &c)
			if (err != nil) != tt.wantErr || err == nil && c.CardID != tt.wantID {
				t.Fatalf("json.Unmarshal = %v, card_id %q; want error %v, card_id %q", err, c.CardID, tt.wantErr, tt.wantID)
			}
			p, perr := Parse([]byte(tt.in))
			if (perr != nil) != tt.wantErr || perr == nil && p.CardID != tt.wantID {
				t.Fatalf("Parse = %v, %+v; want error %v, card_id %q", perr, p, tt.wantErr, tt.wantID)
			}
			checkFast(t, []byte(tt.in))
		})
	}
}

// TestUnmarshalKeepsAbsentFields: like encoding/json, decoding into a card
// leaves the fields the input does not name.
func TestUnmarshalKeepsAbsentFields(t *testing.T) {
	c := callCard()
	if err := json.Unmarshal([]byte(`{"author_id":"w"}`), c); err != nil {
		t.Fatal(err)
	}
	if c.AuthorID != "w" || c.CardID != callCard().CardID || c.Metadata.AgentTurnID != "turn1" {
		t.Fatalf("got %+v", c)
	}
}
