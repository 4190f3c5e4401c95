package authz_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/authz"
)

func TestParseAuditRecords(t *testing.T) {
	for _, tc := range []struct {
		name  string
		body  string
		tools []string
		err   string
	}{
		{"one record", `{"tool_name":"echo","decision":"allow"}`, []string{"echo"}, ""},
		{"two lines", "{\"tool_name\":\"a\"}\n{\"tool_name\":\"b\"}\n", []string{"a", "b"}, ""},
		{"blank lines and CRLF", "\r\n{\"tool_name\":\"a\"}\r\n\n{\"tool_name\":\"b\"}", []string{"a", "b"}, ""},
		{"empty", "", nil, "no record"},
		{"only blanks", "\n \n", nil, "no record"},
		{"array", `[{"tool_name":"a"}]`, nil, "line 1 is not a JSON object"},
		{"bad second line", "{\"tool_name\":\"a\"}\n{\"tool_name\":", nil, "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := authz.ParseAuditRecords([]byte(tc.body))
			if tc.err != "" {
				if !errors.Is(err, authz.ErrAuditBody) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want ErrAuditBody with %q", err, tc.err)
				}
				return
			}
			if err != nil || len(recs) != len(tc.tools) {
				t.Fatalf("got %d records, %v; want %d", len(recs), err, len(tc.tools))
			}
			for i, r := range recs {
				if r.ToolName != tc.tools[i] {
					t.Fatalf("record %d tool %q, want %q", i, r.ToolName, tc.tools[i])
				}
			}
		})
	}
}

func FuzzParseAuditRecords(f *testing.F) {
	f.Add([]byte(`{"tool_name":"echo","decision":"allow"}`))
	f.Add([]byte("{\"a\":1}\n\n{\"b\":2}\n"))
	f.Add([]byte("[1]"))
	f.Fuzz(func(t *testing.T, body []byte) {
		recs, err := authz.ParseAuditRecords(body)
		if err == nil && len(recs) == 0 {
			t.Fatal("no error and no record")
		}
		if err != nil && !errors.Is(err, authz.ErrAuditBody) {
			t.Fatalf("error %v is not ErrAuditBody", err)
		}
	})
}

func ExampleParseAuditRecords() {
	body := []byte(`{"tool_name":"echo","decision":"allow","reason":"allowed"}` + "\n" +
		`{"tool_name":"book","decision":"deny","reason":"mandate_missing"}` + "\n")
	recs, err := authz.ParseAuditRecords(body)
	if err != nil {
		panic(err)
	}
	for _, r := range recs {
		fmt.Println(r.ToolName, r.Decision, r.Reason)
	}
	// Output:
	// echo allow allowed
	// book deny mandate_missing
}
