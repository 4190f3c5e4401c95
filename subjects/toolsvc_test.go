package subjects_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/subjects"
)

func TestToolService(t *testing.T) {
	tests := []struct {
		tool, want string
	}{
		{"echo", "cg.v1r3.demo.default.svc.cardstore.put_result.echo"},
		{"ATLAS_TASK_LIST", "cg.v1r3.demo.default.svc.cardstore.put_result.ATLAS_TASK_LIST"},
		{"weather.get", "cg.v1r3.demo.default.svc.cardstore.put_result.weather_get_"},
	}
	for _, tc := range tests {
		t.Run(tc.tool, func(t *testing.T) {
			s, err := subjects.ToolService("v1r3", "demo", "default", "cardstore", "put_result", tc.tool)
			if err != nil || !strings.HasPrefix(s.String(), tc.want) {
				t.Fatalf("ToolService = %q, %v; want %q…", s, err, tc.want)
			}
			back, err := subjects.ParseToolService(s.String())
			if err != nil || back != s {
				t.Fatalf("ParseToolService(%q) = %+v, %v; want %+v", s, back, err, s)
			}
			allow, _ := subjects.ToolServiceAllow("v1r3", "cardstore", "put_result", tc.tool)
			if allow != "cg.v1r3.*.*.svc.cardstore.put_result."+s.Tool {
				t.Fatalf("ToolServiceAllow = %q", allow)
			}
		})
	}
	if subjects.ToolToken("a.b") == subjects.ToolToken("a_b") {
		t.Fatal("a.b and a_b share a tool token")
	}
	for _, bad := range []string{"cg.v1r3.demo.default.svc.cardstore.put_result", "cg.v1r3.demo.default.cmd.tool.echo.x", "cg.v1r3.demo.default.svc.cardstore.put_result.a*b", "nodots"} {
		if _, err := subjects.ParseToolService(bad); !errors.Is(err, subjects.ErrInvalidSubject) {
			t.Errorf("ParseToolService(%q) = %v, want ErrInvalidSubject", bad, err)
		}
	}
	if _, err := subjects.Parse("cg.v1r3.demo.default.svc.cardstore.put_result.echo"); err == nil {
		t.Fatal("Parse accepts a tool-scoped subject; plain svc servers would then see it")
	}
}

func TestDispatchSubjects(t *testing.T) {
	s, err := subjects.Dispatch("v1r4", "demo", "main", "demo-agent")
	if err != nil || s.String() != "cg.v1r4.demo.main.svc.dispatch.call.demo-agent" {
		t.Fatalf("Dispatch = %v, %v", s, err)
	}
	if p, err := subjects.ParseToolService(s.String()); err != nil || p.Tool != "demo-agent" || p.Op != subjects.DispatchCallOp {
		t.Fatalf("parse: %+v %v", p, err)
	}
	o, err := subjects.OperatorDispatch("v1r4", "demo", "main", "ops")
	if err != nil || o.String() != "cg.v1r4.demo.main.svc.dispatch.operator.ops" {
		t.Fatalf("OperatorDispatch = %v, %v", o, err)
	}
	k, err := subjects.DispatchKeys("v1r4", "demo", "main")
	if err != nil || k.String() != "cg.v1r4.demo.main.svc.dispatch.keys" {
		t.Fatalf("DispatchKeys = %v, %v", k, err)
	}
}
