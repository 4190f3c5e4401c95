package turn_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/turn"
)

func TestDiff(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, new string
		want     []string // Change.String()
	}{
		{"equal objects, other key order and spacing", `{"a":1,"b":[1,2]}`, `{ "b": [1,2], "a": 1 }`, nil},
		{"numbers by value", `{"n":1,"f":2.50}`, `{"n":1.0,"f":2.5e0}`, nil},
		{"changed scalar", `{"n":1}`, `{"n":2}`, []string{"changed /n: 1 → 2"}},
		{"added and removed keys", `{"a":1,"b":2}`, `{"b":2,"c":3}`, []string{"removed /a: 1", "added   /c: 3"}},
		{"nested path", `{"a":{"b":[1,{"c":"x"}]}}`, `{"a":{"b":[1,{"c":"y"}]}}`, []string{`changed /a/b/1/c: "x" → "y"`}},
		{"array grows", `[1]`, `[1,2,3]`, []string{"added   /1: 2", "added   /2: 3"}},
		{"array shrinks", `[1,2]`, `[1]`, []string{"removed /1: 2"}},
		{"type change", `{"a":[1]}`, `{"a":{"0":1}}`, []string{`changed /a: [1] → {"0":1}`}},
		{"null vs absent", `{"a":null}`, `{}`, []string{"removed /a: null"}},
		{"pointer escaping", `{"a/b":1,"c~d":1}`, `{"a/b":2,"c~d":2}`, []string{"changed /a~1b: 1 → 2", "changed /c~0d: 1 → 2"}},
		{"whole document", `1`, `"1"`, []string{`changed (document): 1 → "1"`}},
		{"absent old", ``, `{"a":1}`, []string{`added   (document): {"a":1}`}},
		{"absent new", `true`, ``, []string{`removed (document): true`}},
		{"both absent", ``, `  `, nil},
		{"big integers differ", `12345678901234567890`, `12345678901234567891`, []string{"changed (document): 12345678901234567890 → 12345678901234567891"}},
		{"huge exponents compare by text", `1e999999999`, `1e999999999`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := turn.Diff(json.RawMessage(tc.old), json.RawMessage(tc.new))
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, c := range got {
				s = append(s, c.String())
			}
			if !reflect.DeepEqual(s, tc.want) {
				t.Fatalf("Diff(%s, %s)\n got %q\nwant %q", tc.old, tc.new, s, tc.want)
			}
		})
	}
}

func TestDiffInvalid(t *testing.T) {
	for _, tc := range []struct{ old, new, side string }{
		{`{`, `{}`, "old"},
		{`{}`, `[1,]`, "new"},
		{`1 2`, `1`, "old"},
	} {
		_, err := turn.Diff(json.RawMessage(tc.old), json.RawMessage(tc.new))
		if !errors.Is(err, turn.ErrInvalid) {
			t.Fatalf("Diff(%q, %q) err = %v, want ErrInvalid", tc.old, tc.new, err)
		}
		if want := tc.side + " document"; !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %q", err, want)
		}
	}
}

// Diff names every difference by its JSON pointer.
func ExampleDiff() {
	changes, _ := turn.Diff(
		json.RawMessage(`{"count":1,"items":["a"],"at":"09:00"}`),
		json.RawMessage(`{"count":2,"items":["a","b"]}`),
	)
	for _, c := range changes {
		fmt.Println(c)
	}
	// Output:
	// removed /at: "09:00"
	// changed /count: 1 → 2
	// added   /items/1: "b"
}

// FuzzDiff checks that Diff never panics, that a document equals itself,
// and that swapping the sides gives as many changes (added ↔ removed).
func FuzzDiff(f *testing.F) {
	for _, s := range [][2]string{
		{`{"a":1}`, `{"a":2}`}, {`[1,[2,[3]]]`, `[1,[2]]`}, {`1e400`, `1E400`}, {`"x"`, `null`}, {`{`, `}`}, {``, `{}`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ab, err := turn.Diff(json.RawMessage(a), json.RawMessage(b))
		if err != nil {
			return
		}
		if self, err := turn.Diff(json.RawMessage(a), json.RawMessage(a)); err != nil || len(self) != 0 {
			t.Fatalf("Diff(a, a) = %v, %v; want no change", self, err)
		}
		ba, err := turn.Diff(json.RawMessage(b), json.RawMessage(a))
		if err != nil || len(ba) != len(ab) {
			t.Fatalf("Diff(b, a) has %d changes, Diff(a, b) %d (err %v)", len(ba), len(ab), err)
		}
	})
}
