package natsstore

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

var _ svc.ReplyDecoder = (*turnPage)(nil)

// TestTurnPageDecode holds the list_turn reply's one-pass decoder to
// encoding/json on the forms a server may send, the server's own and
// others.
func TestTurnPageDecode(t *testing.T) {
	c := &card.Card{CardID: card.NewID(), ProjectID: "p", Type: "note", AuthorID: "a", Content: json.RawMessage(`{"x":1}`),
		Metadata: card.Metadata{AgentTurnID: "t"}}
	enc, err := card.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	e := string(enc)
	for _, tc := range []struct {
		name, in string
		fast     bool // the one-pass path takes it
	}{
		{"server, last page", `{"cards":[` + e + `]}`, true},
		{"server, more follow", `{"cards":[` + e + `,` + e + `],"next":42}`, true},
		{"server, empty", `{"cards":[]}`, true},
		{"encoding/json, empty", `{"cards":null}`, true},
		{"other key order", `{"next":42,"cards":[` + e + `]}`, false},
		{"white space", `{ "cards": [` + e + `] }`, false},
		{"next zero-padded", `{"cards":[],"next":042}`, false},
		{"unknown member", `{"cards":[],"more":true}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got turnPage
			if err := got.DecodeReply([]byte(tc.in)); err != nil {
				if json.Valid([]byte(tc.in)) {
					t.Fatalf("DecodeReply: %v", err)
				}
				return
			}
			var want cardstore.ListTurnResult
			if err := json.Unmarshal([]byte(tc.in), &want); err != nil {
				t.Fatalf("DecodeReply accepts what encoding/json refuses: %v", err)
			}
			if got.Next != want.Next || len(got.Cards) != len(want.Cards) {
				t.Fatalf("got next %d, %d cards; want next %d, %d cards", got.Next, len(got.Cards), want.Next, len(want.Cards))
			}
			for i := range got.Cards {
				a, _ := card.Encode(got.Cards[i])
				b, _ := card.Encode(want.Cards[i])
				if string(a) != string(b) {
					t.Fatalf("card %d: got %s, want %s", i, a, b)
				}
			}
			rest, ok := []byte(tc.in), false
			if len(rest) > len(pageHead) && string(rest[:len(pageHead)]) == pageHead {
				if _, n, err := card.ParseList(rest[len(pageHead):]); err == nil {
					_, ok = pageTail(rest[len(pageHead)+n:])
				}
			}
			if ok != tc.fast {
				t.Errorf("fast path taken: %v, want %v", ok, tc.fast)
			}
		})
	}
	var bad turnPage
	if err := bad.DecodeReply([]byte(`{"cards":[` + e)); err == nil {
		t.Error("a truncated reply decoded")
	}
	if !reflect.DeepEqual(bad, turnPage{}) {
		t.Error("a failed decode changed the page")
	}
}

var _ svc.ReplyDecoder = (*cardReply)(nil)

// TestCardReplyDecode holds the get reply's one-pass decoder to
// encoding/json.
func TestCardReplyDecode(t *testing.T) {
	c := &card.Card{CardID: card.NewID(), ProjectID: "p", Type: "note", AuthorID: "a", Content: json.RawMessage(`{"x":1}`)}
	enc, err := card.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	e := string(enc)
	for _, in := range []string{
		`{"card":` + e + `}`,
		`{"card": ` + e + ` }`,
		`{"card":null}`,
		`{"card":` + e + `,"other":{}}`,
		`{"other":1,"card":` + e + `}`,
	} {
		var got cardReply
		if err := got.DecodeReply([]byte(in)); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		var want struct {
			Card *card.Card `json:"card"`
		}
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(got.Card)
		b, _ := json.Marshal(want.Card)
		if string(a) != string(b) {
			t.Errorf("%s: got %s, want %s", in, a, b)
		}
	}
	var bad cardReply
	if err := bad.DecodeReply([]byte(`{"card":` + e)); err == nil {
		t.Error("a truncated reply decoded")
	}
}
