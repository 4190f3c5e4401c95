package card

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestInvalidUTF8Refused: Decode refuses invalid UTF-8 in any string of a
// card with an error naming the field, where encoding/json would replace
// it with U+FFFD.
func TestInvalidUTF8Refused(t *testing.T) {
	const bad = "a\xffb"
	content := func(s string) string { return `{"text":"` + s + `","list":[1,{"deep":"x"}]}` }
	metadata := func(s string) string { return `{"agent_id":"a1","agent_turn_id":"turn1","x":{"y":["` + s + `"]}}` }
	tests := []struct {
		name string
		json string
		want string // the field the error names
	}{
		{"content string", fmtCard("t", "", content(bad), metadata("ok")), "content.text"},
		{"content nested in an array", fmtCard("t", "", `{"list":[1,{"deep":"`+bad+`"}]}`, metadata("ok")), "content.list[1].deep"},
		{"content key", fmtCard("t", "", `{"k`+bad+`":1}`, metadata("ok")), "a key of content"},
		{"content a bare string", fmtCard("t", "", `"`+bad+`"`, metadata("ok")), "content holds"},
		{"metadata known field", fmtCard("t", "", content("ok"), `{"agent_id":"`+bad+`","agent_turn_id":"turn1"}`), "metadata.agent_id"},
		{"metadata extra value", fmtCard("t", "", content("ok"), metadata(bad)), "metadata.x.y[0]"},
		{"metadata key", fmtCard("t", "", content("ok"), `{"`+bad+`":1}`), "a key of metadata"},
		{"type", strings.Replace(fmtCard("TYPE", "", content("ok"), metadata("ok")), "TYPE", bad, 1), "type"},
		{"author_id", strings.Replace(fmtCard("t", "AUTHOR", content("ok"), metadata("ok")), "AUTHOR", bad, 1), "author_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.json)
			if utf8.Valid(data) {
				t.Fatalf("test card is valid UTF-8: %q", data)
			}
			_, err := Decode(data)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "invalid UTF-8") {
				t.Fatalf("Decode = %v, want ErrInvalid naming %s and invalid UTF-8", err, tc.want)
			}
		})
	}
}

func fmtCard(typ, author, content, metadata string) string {
	b, _ := json.Marshal(typ)
	a, _ := json.Marshal(author)
	return `{"card_id":"01890a5d-ac96-774b-bcce-b302099a8057","project_id":"proj","type":` + string(b) + `,"author_id":` + string(a) +
		`,"content":` + content + `,"metadata":` + metadata + `,"tool_call_id":"call1","created_at":"2026-11-21T10:00:00Z"}`
}

// TestValidateInvalidUTF8: a card built in Go with invalid UTF-8 in a
// string field is refused, naming the field (json.Marshal would replace
// the bytes with U+FFFD on the way to the store).
func TestValidateInvalidUTF8(t *testing.T) {
	const bad = "a\xffb"
	tests := []struct {
		name   string
		mutate func(c *Card)
		want   string
	}{
		{"type", func(c *Card) { c.Type = "t" + bad; c.Content = json.RawMessage(`{}`) }, "type holds invalid UTF-8"},
		{"author_id", func(c *Card) { c.AuthorID = bad }, "author_id holds invalid UTF-8"},
		{"metadata.agent_id", func(c *Card) { c.Metadata.AgentID = bad }, "metadata.agent_id"},
		{"metadata.role", func(c *Card) { c.Metadata.Role = bad }, "metadata.role"},
		{"metadata extra", func(c *Card) {
			c.Metadata.Extra = map[string]json.RawMessage{"ok": json.RawMessage(`1`), "z": json.RawMessage(`["` + bad + `"]`)}
		},
			"metadata.z[0] holds invalid UTF-8"},
		{"metadata extra key", func(c *Card) { c.Metadata.Extra = map[string]json.RawMessage{bad: json.RawMessage(`1`)} }, "a key of metadata holds invalid UTF-8"},
		{"content", func(c *Card) {
			c.Content = json.RawMessage(`{"tool_name":"echo","arguments":{"text":"` + bad + `"}}`)
		}, "content.arguments.text holds invalid UTF-8 (byte 0xff"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := callCard()
			tc.mutate(c)
			err := c.Validate()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

// TestCheckUTF8 covers the path walker on its own.
func TestCheckUTF8(t *testing.T) {
	tests := []struct {
		field, json, want string // ' for "; want "" means valid
	}{
		{"content", "{'a':'é'}", ""},
		{"content", "{'a':'\xe9'}", "content.a holds invalid UTF-8 (byte 0xe9 at offset 6)"},
		{"", "{'a':[{'b':'\xc3'}]}", "a[0].b holds"},
		{"", "['ok','\xff']", "[1] holds"},
		{"", "{'\xff':1}", "a key of the top-level object holds"},
		{"", "'\xff'", "the JSON holds"},
		{"x", "{'a':\xff", "x holds"}, // not JSON: the field only
		{"cards", "[{'metadata':{'agent_id':'\xfe'}}]", "cards[0].metadata.agent_id holds"},
	}
	for _, tc := range tests {
		tc.json = strings.ReplaceAll(tc.json, "'", `"`)
		err := CheckUTF8(tc.field, []byte(tc.json))
		if tc.want == "" {
			if err != nil {
				t.Errorf("CheckUTF8(%q, %q) = %v, want nil", tc.field, tc.json, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckUTF8(%q, %q) = %v, want ErrInvalid containing %q", tc.field, tc.json, err, tc.want)
		}
	}
}
