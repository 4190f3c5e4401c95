package card

import (
	"encoding/json"
	"testing"
)

func TestParseList(t *testing.T) {
	call, _ := Encode(callCard())
	res, _ := Encode(resultCard(`{"status":"success","after_execution":"suspend","result":{"x":1}}`))
	for _, tc := range []struct {
		name, in string
		n        int // cards, -1 for a nil slice
		used     int // bytes the array takes; 0: all of in
		wantErr  bool
	}{
		{name: "two cards", in: "[" + string(call) + "," + string(res) + "]", n: 2},
		{name: "white space", in: " [ " + string(call) + " , " + string(res) + " ] ", n: 2, used: len(string(call)+string(res)) + 8},
		{name: "empty", in: "[]", n: 0},
		{name: "null array", in: "null", n: -1},
		{name: "null card", in: "[null," + string(res) + "]", n: 2},
		{name: "trailing data kept", in: "[" + string(res) + `],"next":7}`, n: 1, used: len(res) + 2},
		{name: "slow path: escaped key", in: `[{"card_\u0069d":"x"}]`, n: 1},
		{name: "not an array", in: `{"cards":[]}`, wantErr: true},
		{name: "unterminated", in: "[" + string(res), wantErr: true},
		{name: "bad card", in: `[{"card_id":1}]`, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cards, used, err := ParseList([]byte(tc.in))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("no error; got %d cards", len(cards))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tc.used
			if want == 0 {
				want = len(tc.in)
			}
			if used != want {
				t.Errorf("used %d bytes, want %d", used, want)
			}
			switch {
			case tc.n < 0 && cards != nil:
				t.Errorf("null array: got %v, want a nil slice", cards)
			case tc.n >= 0 && (cards == nil || len(cards) != tc.n):
				t.Errorf("got %d cards (nil %v), want %d", len(cards), cards == nil, tc.n)
			}
			var ref []*Card
			if err := json.Unmarshal([]byte(tc.in)[:used], &ref); err != nil {
				t.Fatalf("encoding/json refuses what ParseList took: %v", err)
			}
			checkSameList(t, []byte(tc.in), cards, ref)
		})
	}
}

func checkSameList(t *testing.T, data []byte, got, ref []*Card) {
	t.Helper()
	if len(got) != len(ref) || (got == nil) != (ref == nil) {
		t.Fatalf("list decoders differ on %q: %d cards (nil %v) vs %d (nil %v)", data, len(got), got == nil, len(ref), ref == nil)
	}
	for i := range got {
		switch {
		case (got[i] == nil) != (ref[i] == nil):
			t.Fatalf("list decoders differ on %q at %d: nil %v vs %v", data, i, got[i] == nil, ref[i] == nil)
		case got[i] != nil && !equalCards(*got[i], *ref[i]):
			t.Fatalf("list decoders differ on %q at %d:\nfast %#v\nref  %#v", data, i, *got[i], *ref[i])
		}
	}
}

// FuzzParseList holds ParseList to json.Unmarshal into []*Card on the
// bytes it says the array took.
func FuzzParseList(f *testing.F) {
	call, _ := Encode(callCard())
	res, _ := Encode(resultCard(`{"status":"failed","after_execution":"suspend","error":{"code":"bad_request","message":"m"}}`))
	for _, s := range []string{"[]", "null", "[null]", "[" + string(call) + "," + string(res) + "]", "[" + string(res) + `],"next":3}`, `[{"Card_ID":"x"}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cards, used, err := ParseList(data)
		if err != nil {
			return
		}
		if used <= 0 || used > len(data) {
			t.Fatalf("used %d of %d bytes", used, len(data))
		}
		var ref []*Card
		if err := json.Unmarshal(data[:used], &ref); err != nil {
			t.Fatalf("ParseList accepts what encoding/json refuses (%v): %q", err, data[:used])
		}
		checkSameList(t, data[:used], cards, ref)
	})
}
