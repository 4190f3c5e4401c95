package svc_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

var errNope = errors.New("nope")

// TestServeTools: one Server serves plain and tool-scoped subjects; the
// tool-scoped handler sees the subject's tool, and its errors travel with
// code and detail like the plain ones.
func TestServeTools(t *testing.T) {
	srv := meshtest.NATS(t)
	codes := svc.Codes{{Err: errNope, Code: "nope"}}
	s, err := svc.NewServer(meshtest.Conn(t, srv), svc.Config{Service: "demo", Codes: codes, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Handle("plain", func(_ context.Context, sc svc.Scope, _ []byte) (any, error) {
		return map[string]string{"op": sc.Op}, nil
	}))
	must(t, s.HandleTools(func(_ context.Context, ts subjects.ToolSubject, data []byte) (any, error) {
		switch ts.Op {
		case "echo":
			return map[string]string{"tool": ts.Tool, "project": ts.Project, "body": string(data)}, nil
		case "fail":
			return nil, svc.WithDetail(errNope, map[string]string{"why": "test"})
		}
		panic("boom")
	}))
	must(t, s.Start())
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	if err := s.HandleTools(nil); err == nil {
		t.Error("HandleTools after Start succeeded")
	}
	nc := meshtest.Conn(t, srv)
	var plain map[string]string
	psubj, _ := svc.Subject(subjects.DefaultVersion, "p", "c", "demo", "plain")
	if err := svc.Call(context.Background(), nc, psubj, codes, nil, &plain); err != nil || plain["op"] != "plain" {
		t.Fatalf("plain = %v, %v", plain, err)
	}
	tests := []struct {
		op, code string
	}{
		{"echo", ""},
		{"fail", "nope"},
		{"panic", svc.CodeInternal},
	}
	for _, tc := range tests {
		t.Run(tc.op, func(t *testing.T) {
			subj, _ := subjects.ToolService(subjects.DefaultVersion, "p", "c", "demo", tc.op, "my.tool")
			var out map[string]string
			err := svc.Call(context.Background(), nc, subj.String(), codes, map[string]int{"x": 1}, &out)
			var re *svc.RemoteError
			switch {
			case tc.code == "" && (err != nil || out["tool"] != subjects.ToolToken("my.tool") || out["project"] != "p" || out["body"] != `{"x":1}`):
				t.Fatalf("echo = %v, %v", out, err)
			case tc.code != "" && (!errors.As(err, &re) || re.Code != tc.code):
				t.Fatalf("%s = %v, want code %s", tc.op, err, tc.code)
			case tc.code == "nope" && string(re.Detail) != `{"why":"test"}`:
				t.Fatalf("detail = %s", re.Detail)
			}
		})
	}
}
