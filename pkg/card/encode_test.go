package card

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// referenceEncode is Encode as encoding/json gives it, the definition
// Encode's one pass must match byte for byte: stored cards are compared
// by their bytes (an identical repeat is idempotent, other bytes a
// conflict), so the encoding never changes.
func referenceEncode(c *Card) ([]byte, error) {
	cc := *c
	if len(cc.Content) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, cc.Content); err != nil {
			return nil, err
		}
		cc.Content = buf.Bytes()
	} else {
		cc.Content = json.RawMessage("null")
	}
	return json.Marshal(&referenceCard{cc.CardID, cc.ProjectID, cc.Type, cc.AuthorID, cc.Content,
		referenceMetadata(cc.Metadata), cc.ToolCallID, cc.CreatedAt.UTC()})
}

// referenceCard is Card with referenceMetadata (TestReferenceCard holds
// its fields to Card's).
type referenceCard struct {
	CardID     string            `json:"card_id"`
	ProjectID  string            `json:"project_id"`
	Type       string            `json:"type"`
	AuthorID   string            `json:"author_id,omitempty"`
	Content    json.RawMessage   `json:"content"`
	Metadata   referenceMetadata `json:"metadata"`
	ToolCallID string            `json:"tool_call_id,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
}

// TestReferenceCard: the reference encodes Card's fields, in Card's
// order, with Card's tags.
func TestReferenceCard(t *testing.T) {
	ct, rt := reflect.TypeOf(Card{}), reflect.TypeOf(referenceCard{})
	if ct.NumField() != rt.NumField() {
		t.Fatalf("Card has %d fields, the reference %d", ct.NumField(), rt.NumField())
	}
	for i := range ct.NumField() {
		if c, r := ct.Field(i), rt.Field(i); c.Name != r.Name || c.Tag != r.Tag {
			t.Errorf("field %d: Card %s %q, reference %s %q", i, c.Name, c.Tag, r.Name, r.Tag)
		}
	}
}

// referenceMetadata marshals as Metadata.MarshalJSON did with
// encoding/json: the typed fields, then, with extra keys, all of them
// through a map (sorted keys).
type referenceMetadata Metadata

func (m referenceMetadata) MarshalJSON() ([]byte, error) {
	typed, err := json.Marshal(metadataFields(m))
	if err != nil {
		return nil, err
	}
	if len(m.Extra) == 0 {
		return typed, nil
	}
	all := map[string]json.RawMessage{}
	if err := json.Unmarshal(typed, &all); err != nil {
		return nil, err
	}
	for k, v := range m.Extra {
		if metadataKnown[k] {
			continue
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			return nil, err
		}
		all[k] = buf.Bytes()
	}
	return json.Marshal(all)
}

// checkEncode fails t unless Encode and referenceEncode agree on c: the
// same bytes, or both an error.
func checkEncode(t *testing.T, c *Card) {
	t.Helper()
	got, gerr := Encode(c)
	want, werr := referenceEncode(c)
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("Encode error %v, encoding/json error %v", gerr, werr)
	}
	if gerr == nil && !bytes.Equal(got, want) {
		t.Fatalf("Encode:\n%s\nencoding/json:\n%s", got, want)
	}
}

func TestEncodeMatchesEncodingJSON(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(c *Card)
	}{
		{"tool.call", func(*Card) {}},
		{"no content", func(c *Card) { c.Content = nil }},
		{"content null", func(c *Card) { c.Content = json.RawMessage(` null `) }},
		{"content with space and HTML", func(c *Card) {
			c.Content = json.RawMessage("{ \"a\" : \"<b>&amp;</b>\u2028\u2029\" , \"n\":[1, 2.5e3 ,true] }")
		}},
		{"invalid content", func(c *Card) { c.Content = json.RawMessage(`{"a":`) }},
		{"author and empty metadata", func(c *Card) { c.AuthorID = "tool.echo"; c.Metadata = Metadata{} }},
		{"every typed field", func(c *Card) {
			c.Metadata = Metadata{AgentID: "a", AgentTurnID: "t", TurnEpoch: -3, StepID: "s", ToolCallID: "c",
				TraceID: "tr", ParentStepID: "p", FunctionName: "f", Role: "tool"}
		}},
		{"extras sorted with the typed fields", func(c *Card) {
			c.Metadata.Extra = map[string]json.RawMessage{"zz": json.RawMessage(` { "x" : "<y>" } `), "b": json.RawMessage(`1`),
				"agent_id": json.RawMessage(`"dropped"`), "step_idz": json.RawMessage(`[ ]`)}
		}},
		{"extras only", func(c *Card) {
			c.Metadata = Metadata{Extra: map[string]json.RawMessage{"k<&>": json.RawMessage(`"v"`)}}
		}},
		{"invalid extra", func(c *Card) { c.Metadata.Extra = map[string]json.RawMessage{"k": json.RawMessage(`{`)} }},
		{"strings to escape", func(c *Card) {
			c.AuthorID = "a\"b\\c\n\x01<&>é\u2028"
			c.Metadata.AgentID = "ag\xffent"
			c.ToolCallID = "tab\there"
		}},
		{"no tool_call_id", func(c *Card) { c.ToolCallID = "" }},
		{"created_at in a zone", func(c *Card) { c.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600)) }},
		{"created_at out of range", func(c *Card) { c.CreatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := callCard()
			tc.mutate(c)
			checkEncode(t, c)
		})
	}
}

// FuzzEncode checks that Encode writes what encoding/json writes for any
// card fields.
func FuzzEncode(f *testing.F) {
	f.Add("tool.echo", `{"a":1}`, "agent", int64(1), "extra", `{"x":"<y>"}`, "call1")
	f.Add("", "", "", int64(0), "", "", "")
	f.Add("a\"<", " [1, \"\u2028\" ] ", "\xff", int64(-1), "agent_id", `"v"`, "c&d")
	f.Fuzz(func(t *testing.T, author, content, agent string, epoch int64, extraKey, extraValue, call string) {
		c := callCard()
		c.AuthorID, c.Content, c.ToolCallID = author, json.RawMessage(content), call
		c.Metadata = Metadata{AgentID: agent, TurnEpoch: epoch, Role: author}
		if extraKey != "" {
			c.Metadata.Extra = map[string]json.RawMessage{extraKey: json.RawMessage(extraValue), "z" + extraKey: json.RawMessage(`0`)}
		}
		checkEncode(t, c)
	})
}

func BenchmarkEncode(b *testing.B) {
	c := callCard()
	c.Metadata.Extra = map[string]json.RawMessage{"admission": json.RawMessage(`{"principal":"agent:a1","decision":"allow"}`)}
	for _, impl := range []struct {
		name string
		enc  func(*Card) ([]byte, error)
	}{{"one-pass", Encode}, {"encoding-json", referenceEncode}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := impl.enc(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
