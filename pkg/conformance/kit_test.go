package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPrint(t *testing.T) {
	rs := []Result{
		{Case: "success", Section: "§5.2", Outcome: Pass, Detail: "ok"},
		{Case: "sigkill", Section: "§7.4", Outcome: Skip, Detail: "needs --exec"},
		{Case: "timeout", Section: "§7.5", Outcome: Fail, Detail: "got success"},
	}
	tests := []struct {
		name   string
		rs     []Result
		asJSON bool
		want   string
		failed bool
	}{
		{"lines", rs, false, "PASS success (§5.2) ok\nSKIP sigkill (§7.4) needs --exec\nFAIL timeout (§7.5) got success\n", true},
		{"skip is not a failure", rs[:2], false, "PASS success (§5.2) ok\nSKIP sigkill (§7.4) needs --exec\n", false},
		{"json", rs[:1], true, `[{"case":"success","detail":"ok","duration_ns":0,"outcome":"PASS","section":"§5.2"}]`, false},
		{"json, no results", nil, true, `[]`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Print(&b, tc.rs, tc.asJSON); err != nil {
				t.Fatal(err)
			}
			got := b.String()
			if tc.asJSON {
				var v any
				if err := json.Unmarshal(b.Bytes(), &v); err != nil {
					t.Fatal(err)
				}
				c, _ := json.Marshal(v)
				got = string(c)
			}
			if got != tc.want || Failed(tc.rs) != tc.failed {
				t.Fatalf("got %q (failed %v), want %q (failed %v)", got, Failed(tc.rs), tc.want, tc.failed)
			}
		})
	}
}

func TestJSONEqual(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{`{"a":1,"b":[1,2]}`, `{"b":[1,2],"a":1}`, true},
		{`"héllo"`, `"h\u00e9llo"`, true},
		{`{"a":1}`, `{"a":2}`, false},
		{`null`, `{}`, false},
	}
	for _, tc := range tests {
		if got := jsonEqual([]byte(tc.a), []byte(tc.b)); got != tc.want {
			t.Errorf("jsonEqual(%s, %s) = %v", tc.a, tc.b, got)
		}
	}
}

func TestRunToolConfig(t *testing.T) {
	_, err := RunTool(t.Context(), ToolConfig{})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "agent client") {
		t.Fatalf("RunTool without an agent: %v", err)
	}
	if _, err := StartProcess("", nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("StartProcess(\"\"): %v", err)
	}
}

func TestProcessRestartsAndStops(t *testing.T) {
	dir := t.TempDir()
	// The process appends a line and exits: the kit starts it again.
	p, err := StartProcess("echo x >> "+dir+"/runs; exit 1", nil)
	if err != nil {
		t.Fatal(err)
	}
	for markerLines(dir+"/runs") < 2 {
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		default:
		}
		waitABit()
	}
	p.Stop(0)
	if p.Starts() < 2 {
		t.Fatalf("started %d times, want at least 2", p.Starts())
	}
}

func waitABit() { time.Sleep(20 * time.Millisecond) }
