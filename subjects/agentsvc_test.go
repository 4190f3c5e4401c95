package subjects_test

import (
	"errors"
	"testing"

	"github.com/utpmesh/utpmesh/subjects"
)

func TestAgentService(t *testing.T) {
	tests := []struct {
		agent, want string
	}{
		{"alice", "cg.v1r4.demo.main.svc.inbox.ack.alice"},
		{"op-ops", "cg.v1r4.demo.main.svc.inbox.ack.op-ops"},
		{"a.b", "cg.v1r4.demo.main.svc.inbox.ack." + subjects.ToolToken("a.b")},
	}
	for _, tc := range tests {
		t.Run(tc.agent, func(t *testing.T) {
			s, err := subjects.AgentService("v1r4", "demo", "main", "inbox", "ack", tc.agent)
			if err != nil || s.String() != tc.want {
				t.Fatalf("AgentService = %q, %v; want %q", s, err, tc.want)
			}
			back, err := subjects.ParseToolService(s.String())
			if err != nil || back != s || back.Tool != subjects.ToolToken(tc.agent) {
				t.Fatalf("ParseToolService(%q) = %+v, %v", s, back, err)
			}
			allow, err := subjects.AgentServiceAllow("v1r4", "demo", "inbox", "ack", tc.agent)
			if err != nil || allow != "cg.v1r4.demo.*.svc.inbox.ack."+s.Tool {
				t.Fatalf("AgentServiceAllow = %q, %v", allow, err)
			}
		})
	}
	if a, err := subjects.AgentServiceAllow("v1r4", "*", "cardstore", "get", "*"); err != nil || a != "cg.v1r4.*.*.svc.cardstore.get.*" {
		t.Fatalf("AgentServiceAllow with wildcards = %q, %v", a, err)
	}
	for _, bad := range []struct{ ver, project, service, op, agent string }{
		{"v1r4", "demo", "inbox", "ack", ""},
		{"v1r4", "de.mo", "inbox", "ack", "a"},
		{"v1r4", "demo", "in*box", "ack", "a"},
		{"v1r4", "demo", "inbox", "", "a"},
		{"", "demo", "inbox", "ack", "a"},
	} {
		if _, err := subjects.AgentServiceAllow(bad.ver, bad.project, bad.service, bad.op, bad.agent); !errors.Is(err, subjects.ErrInvalidSubject) {
			t.Errorf("AgentServiceAllow(%+v) = %v, want ErrInvalidSubject", bad, err)
		}
	}
	if _, err := subjects.AgentService("v1r4", "demo", "main", "inbox", "ack", ""); !errors.Is(err, subjects.ErrInvalidSubject) {
		t.Errorf("AgentService with no agent = %v, want ErrInvalidSubject", err)
	}
}

// FuzzAgentService: any agent id either fails with ErrInvalidSubject or
// builds a subject that parses back to the same parts, whose agent token
// the publish permission AgentServiceAllow names.
func FuzzAgentService(f *testing.F) {
	for _, a := range []string{"alice", "op-ops", "a.b", "*", ">", "", "a b", "\xff", "x.y.z"} {
		f.Add("demo", a)
	}
	f.Fuzz(func(t *testing.T, project, agent string) {
		s, err := subjects.AgentService("v1r4", project, "main", "cardstore", "get", agent)
		if err != nil {
			if !errors.Is(err, subjects.ErrInvalidSubject) {
				t.Fatalf("AgentService(%q, %q) error %v does not match ErrInvalidSubject", project, agent, err)
			}
			return
		}
		back, err := subjects.ParseToolService(s.String())
		if err != nil || back != s || back.Tool != subjects.ToolToken(agent) {
			t.Fatalf("ParseToolService(%q) = %+v, %v; want %+v", s, back, err, s)
		}
		allow, err := subjects.AgentServiceAllow("v1r4", project, "cardstore", "get", agent)
		if agent != "*" && (err != nil || allow != "cg.v1r4."+project+".*.svc.cardstore.get."+s.Tool) {
			t.Fatalf("AgentServiceAllow(%q, %q) = %q, %v; want the subject's token %q", project, agent, allow, err, s.Tool)
		}
	})
}
