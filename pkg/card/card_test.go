package card

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func callCard() *Card {
	return &Card{
		CardID: "01890a5d-ac96-774b-bcce-b302099a8057", ProjectID: "proj", Type: TypeToolCall,
		Content:    json.RawMessage(`{"tool_name":"echo","arguments":{"x":1},"target_subject":"cg.v1r3.proj.ch.cmd.tool.echo"}`),
		Metadata:   Metadata{AgentID: "a1", AgentTurnID: "turn1", TurnEpoch: 1, StepID: "s1"},
		ToolCallID: "call1", CreatedAt: t0,
	}
}

func resultCard(content string) *Card {
	c := callCard()
	c.Type = TypeToolResult
	c.Content = json.RawMessage(content)
	return c
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Card)
		want   string // substring of the error; "" means valid
	}{
		{"valid tool.call", func(c *Card) {}, ""},
		{"valid other type with null content", func(c *Card) { c.Type = "agent.thought"; c.Content = nil; c.ToolCallID = "" }, ""},
		{"upper-case id", func(c *Card) { c.CardID = strings.ToUpper(c.CardID) }, "card_id"},
		{"short id", func(c *Card) { c.CardID = "abc" }, "card_id"},
		{"missing project", func(c *Card) { c.ProjectID = "" }, "project_id"},
		{"project with dot", func(c *Card) { c.ProjectID = "a.b" }, "invalid character"},
		{"missing type", func(c *Card) { c.Type = "" }, "type is required"},
		{"type with space", func(c *Card) { c.Type = "a b" }, "white space"},
		{"missing created_at", func(c *Card) { c.CreatedAt = time.Time{} }, "created_at"},
		{"call without tool_call_id", func(c *Card) { c.ToolCallID = "" }, "tool_call_id is required"},
		{"metadata tool_call_id differs", func(c *Card) { c.Metadata.ToolCallID = "other" }, "differs"},
		{"call without turn", func(c *Card) { c.Metadata.AgentTurnID = "" }, "agent_turn_id is required"},
		{"call without tool_name", func(c *Card) { c.Content = json.RawMessage(`{"arguments":{}}`) }, "tool_name"},
		{"call with array arguments", func(c *Card) { c.Content = json.RawMessage(`{"tool_name":"x","arguments":[1]}`) }, "must be a JSON object"},
		{"negative epoch", func(c *Card) { c.Metadata.TurnEpoch = -1 }, "turn_epoch"},
		{"long step id", func(c *Card) { c.Metadata.StepID = strings.Repeat("s", MaxIDLen+1) }, "metadata.step_id"},
		{"invalid content json", func(c *Card) { c.Type = "x"; c.Content = json.RawMessage(`{`) }, "content is not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := callCard()
			tt.mutate(c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want ErrInvalid containing %q", err, tt.want)
			}
		})
	}
}

func TestToolResult(t *testing.T) {
	tests := []struct {
		content string
		want    string
	}{
		{`{"status":"success","after_execution":"suspend","result":{"ok":true}}`, ""},
		{`{"status":"partial","after_execution":"terminate"}`, ""},
		{`{"status":"failed","after_execution":"suspend","error":{"code":"bad_request","message":"x"}}`, ""},
		{`{"status":"failed","after_execution":"suspend"}`, "error is required"},
		{`{"status":"done","after_execution":"suspend"}`, "status"},
		{`{"status":"success","after_execution":"pause"}`, "after_execution"},
		{`[]`, "tool.result content"},
	}
	for _, tt := range tests {
		err := resultCard(tt.content).Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("content %s: Validate() = %v, want %q", tt.content, err, tt.want)
		}
	}
	if _, err := callCard().ToolResult(); !errors.Is(err, ErrWrongType) {
		t.Errorf("ToolResult on a tool.call = %v, want ErrWrongType", err)
	}
}

func TestEncodeCanonical(t *testing.T) {
	a := callCard()
	b := callCard()
	b.Content = json.RawMessage("{ \"tool_name\" : \"echo\",\n \"arguments\": {\"x\": 1}, \"target_subject\":\"cg.v1r3.proj.ch.cmd.tool.echo\" }")
	b.CreatedAt = t0.In(time.FixedZone("X", 3600))
	ea, err := Encode(a)
	if err != nil {
		t.Fatal(err)
	}
	eb, err := Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(ea) != string(eb) {
		t.Fatalf("canonical encodings differ:\n%s\n%s", ea, eb)
	}
	back, err := Decode(ea)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Encode(back)
	if string(again) != string(ea) {
		t.Fatalf("decode/encode not stable:\n%s\n%s", ea, again)
	}
}

func TestMetadataExtra(t *testing.T) {
	in := `{"agent_id":"a","custom":{"k": [1, 2]},"role":"tool","zeta":"z"}`
	var m Metadata
	if err := json.Unmarshal([]byte(in), &m); err != nil {
		t.Fatal(err)
	}
	if m.AgentID != "a" || m.Role != "tool" || len(m.Extra) != 2 {
		t.Fatalf("got %+v", m)
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"agent_id":"a","custom":{"k":[1,2]},"role":"tool","zeta":"z"}`
	if string(out) != want {
		t.Fatalf("Marshal = %s, want %s", out, want)
	}
}

func TestEffectiveAfterExecution(t *testing.T) {
	tests := []struct {
		result string
		want   AfterExecution
	}{
		{`{"__cg_control":{"after_execution":"terminate"}}`, Terminate},
		{`{"__cg_control":{"after_execution":"bogus"}}`, Suspend},
		{`{"__cg_control":"x"}`, Suspend},
		{`[1]`, Suspend},
		{``, Suspend},
		{`{"other":1}`, Suspend},
	}
	for _, tt := range tests {
		if got := EffectiveAfterExecution(json.RawMessage(tt.result), Suspend); got != tt.want {
			t.Errorf("EffectiveAfterExecution(%s) = %s, want %s", tt.result, got, tt.want)
		}
	}
}

func TestNewResultContent(t *testing.T) {
	rc := NewResultContent(StatusFailed, Suspend, CodeBadRequest, "arguments/x: expected string", nil)
	c := resultCard("{}")
	raw, _ := json.Marshal(rc)
	c.Content = raw
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rc.Result), `"error_code":"bad_request"`) {
		t.Fatalf("result = %s", rc.Result)
	}
}

func TestNewIDAndValidID(t *testing.T) {
	id := NewID()
	if !ValidID(id) || id[14] != '7' {
		t.Fatalf("NewID() = %q, want a canonical UUIDv7", id)
	}
	if ValidID("01890a5d-ac96-774b-bcce-b302099a805g") || ValidID("01890a5dxac96-774b-bcce-b302099a8057") {
		t.Fatal("ValidID accepted a malformed id")
	}
}

func TestBoxID(t *testing.T) {
	for _, bad := range []string{"", "a b", strings.Repeat("x", MaxIDLen+1), "é"} {
		if err := ValidateBoxID(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateBoxID(%q) = %v", bad, err)
		}
	}
	if err := ValidateBoxID("ctx-1:main"); err != nil {
		t.Error(err)
	}
}
