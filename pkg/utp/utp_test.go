package utp

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

const okBody = `{"agent_id":"a1","agent_turn_id":"t1","turn_epoch":1,"tool_call_id":"c1","after_execution":"suspend","tool_call_card_id":"01890a5d-ac96-774b-bcce-b302099a8057"}`

func TestParseCommand(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		hdr      nats.Header
		pmo      bool
		field    string // "" = valid
		routable bool
	}{
		{"valid", okBody, nil, false, "", false},
		{"unknown fields ignored", strings.Replace(okBody, "{", `{"x_extra":{"deep":[1]},`, 1), nil, false, "", false},
		{"not an object", `[1]`, nil, false, "(body)", false},
		{"not json", `{`, nil, false, "(body)", false},
		{"args banned", strings.Replace(okBody, "{", `{"args":{},`, 1), nil, false, "args", true},
		{"arguments banned", strings.Replace(okBody, "{", `{"arguments":{},`, 1), nil, false, "arguments", true},
		{"result banned", strings.Replace(okBody, "{", `{"result":null,`, 1), nil, false, "result", true},
		{"missing agent_id", strings.Replace(okBody, `"agent_id":"a1",`, "", 1), nil, false, "agent_id", false},
		{"missing turn", strings.Replace(okBody, `"agent_turn_id":"t1",`, "", 1), nil, false, "agent_turn_id", false},
		{"missing epoch", strings.Replace(okBody, `"turn_epoch":1,`, "", 1), nil, false, "turn_epoch", false},
		{"string epoch", strings.Replace(okBody, `"turn_epoch":1`, `"turn_epoch":"1"`, 1), nil, false, "turn_epoch", false},
		{"missing call id", strings.Replace(okBody, `"tool_call_id":"c1",`, "", 1), nil, false, "tool_call_id", false},
		{"missing after_execution", strings.Replace(okBody, `"after_execution":"suspend",`, "", 1), nil, false, "after_execution", true},
		{"bad after_execution", strings.Replace(okBody, `"suspend"`, `"pause"`, 1), nil, false, "after_execution", true},
		{"missing card id", strings.Replace(okBody, `,"tool_call_card_id":"01890a5d-ac96-774b-bcce-b302099a8057"`, "", 1), nil, false, "tool_call_card_id", true},
		{"bad card id", strings.Replace(okBody, `01890a5d`, `X1890a5d`, 1), nil, false, "tool_call_card_id", true},
		{"agent id not a token", strings.Replace(okBody, `"a1"`, `"a.1"`, 1), nil, false, "agent_id", false},
		{"pmo needs step_id", okBody, nil, true, "step_id", true},
		{"pmo ok", strings.Replace(okBody, "{", `{"step_id":"s","tool_name":"list_tools",`, 1), nil, true, "", false},
		{"v1r4 headers only", `{"after_execution":"suspend","tool_call_card_id":"01890a5d-ac96-774b-bcce-b302099a8057","tool_name":"echo"}`,
			nats.Header{HeaderAgentID: {"a1"}, HeaderAgentTurnID: {"t1"}, HeaderTurnEpoch: {"3"}, HeaderToolCallID: {"c1"}}, false, "", false},
		{"header epoch not int", `{"after_execution":"suspend","tool_call_card_id":"01890a5d-ac96-774b-bcce-b302099a8057"}`,
			nats.Header{HeaderAgentID: {"a1"}, HeaderAgentTurnID: {"t1"}, HeaderTurnEpoch: {"x"}, HeaderToolCallID: {"c1"}}, false, "turn_epoch", false},
		{"payload and header disagree", okBody, nats.Header{HeaderToolCallID: {"other"}}, false, "tool_call_id", false},
		{"header epoch disagrees", okBody, nats.Header{HeaderTurnEpoch: {"2"}}, false, "turn_epoch", true},
		{"header project mismatch", okBody, nats.Header{HeaderProjectID: {"other"}}, false, "project_id", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseCommand([]byte(tt.body), tt.hdr, "p", "ch", tt.pmo)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("ParseCommand() = %v", err)
				}
				if c.AgentID != "a1" || c.ToolCallID != "c1" {
					t.Fatalf("command = %+v", c)
				}
				return
			}
			var ce *CommandError
			if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidCommand) {
				t.Fatalf("ParseCommand() = %v, want *CommandError", err)
			}
			if ce.Field != tt.field || ce.Routable != tt.routable {
				t.Fatalf("field=%q routable=%v (%v), want field=%q routable=%v", ce.Field, ce.Routable, ce, tt.field, tt.routable)
			}
		})
	}
}

func TestParseReport(t *testing.T) {
	good := `{"tool_call_id":"c","agent_turn_id":"t","turn_epoch":0,"agent_id":"a","tool_result_card_id":"01890a5d-ac96-774b-bcce-b302099a8057","status":"success","after_execution":"terminate","extra":1}`
	if _, err := ParseReport([]byte(good)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		`nope`,
		strings.Replace(good, `"turn_epoch":0,`, "", 1),
		strings.Replace(good, `"success"`, `"ok"`, 1),
		strings.Replace(good, `"terminate"`, `"stop"`, 1),
		strings.Replace(good, `"extra":1`, `"result":{}`, 1),
		strings.Replace(good, `"agent_id":"a"`, `"agent_id":""`, 1),
	} {
		if _, err := ParseReport([]byte(bad)); !errors.Is(err, ErrInvalidReport) {
			t.Errorf("ParseReport(%s) = %v, want ErrInvalidReport", bad, err)
		}
	}
}

func TestTraceparent(t *testing.T) {
	tp := NewTraceparent()
	if id := TraceID(tp); len(id) != 32 {
		t.Fatalf("TraceID(%q) = %q", tp, id)
	}
	if TraceID("garbage") != "" || TraceID("00-zz-aa-01") != "" {
		t.Fatal("TraceID accepted garbage")
	}
}

func FuzzParseCommand(f *testing.F) {
	f.Add([]byte(okBody), "", false)
	f.Add([]byte(`{"args":1}`), "3", true)
	f.Fuzz(func(t *testing.T, data []byte, epochHdr string, pmo bool) {
		h := nats.Header{HeaderTurnEpoch: {epochHdr}}
		c, err := ParseCommand(data, h, "p", "c", pmo)
		if (c == nil) == (err == nil) {
			t.Fatalf("exactly one of command and error must be set: %v %v", c, err)
		}
	})
}
