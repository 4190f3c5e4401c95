package subjects_test

import (
	"errors"
	"fmt"

	"github.com/utpmesh/utpmesh/subjects"
)

func ExampleParse() {
	s, err := subjects.Parse("cg.v1r3.proj.chan.cmd.tool.web_search")
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Project, s.Channel, s.Category, s.Component, s.Target)
	fmt.Println(s.Kind())
	// Output:
	// proj chan cmd tool web_search
	// tool_command
}

func ExampleParse_error() {
	_, err := subjects.Parse("cg.v1r3.proj.chan.cmd.tool.web_search.a*b")
	fmt.Println(err)
	var te *subjects.TokenError
	if errors.As(err, &te) {
		fmt.Println(te.Role, "|", te.Reason)
	}
	fmt.Println(errors.Is(err, subjects.ErrInvalidSubject), errors.Is(err, subjects.ErrInvalidToken))
	// Output:
	// subjects: invalid subject "cg.v1r3.proj.chan.cmd.tool.web_search.a*b": invalid suffix[0] "a*b": invalid character '*' at byte 1
	// suffix[0] | invalid character '*' at byte 1
	// true true
}

func ExampleValidateToken() {
	fmt.Println(subjects.ValidateToken("agent_id", "planner-1"))
	fmt.Println(subjects.ValidateToken("agent_id", ""))
	// Output:
	// <nil>
	// invalid agent_id "": empty
}

func ExampleSubject_Kind() {
	for _, in := range []string{
		"cg.v1r3.p.c.cmd.sys.pmo.internal.web_search",
		"cg.v1r3.p.c.cmd.sys.inbox.report",
		"cg.v1r3.p.c.cmd.agent.planner.wakeup",
		"cg.v1r3.p.c.svc.cardstore.get",
		"cg.v1r3.p.c.evt.sys.deadletter.command",
		"cg.v1r3.p.c.str.agent.planner.tokens",
	} {
		s, _ := subjects.Parse(in)
		fmt.Println(s.Kind())
	}
	// Output:
	// pmo_internal
	// inbox_report
	// agent_wakeup
	// service
	// dead_letter
	// other
}

func ExamplePMOInternal() {
	s, err := subjects.PMOInternal(subjects.DefaultVersion, "proj", "chan", "web_search")
	if err != nil {
		panic(err)
	}
	tool, ok := s.PMOTool()
	fmt.Println(s)
	fmt.Println(tool, ok)
	// Output:
	// cg.v1r3.proj.chan.cmd.sys.pmo.internal.web_search
	// web_search true
}

func ExampleAgentWakeup() {
	s, _ := subjects.AgentWakeup(subjects.DefaultVersion, "proj", "chan", "planner")
	id, ok := s.AgentID()
	fmt.Println(s, id, ok)
	// Output:
	// cg.v1r3.proj.chan.cmd.agent.planner.wakeup planner true
}

func ExampleService() {
	s, _ := subjects.Service(subjects.DefaultVersion, "proj", "chan", "cardstore", "get")
	fmt.Println(s)
	p, _ := subjects.ServicePattern(subjects.DefaultVersion, "cardstore")
	fmt.Println(p)
	// Output:
	// cg.v1r3.proj.chan.svc.cardstore.get
	// cg.v1r3.*.*.svc.cardstore.*
}

func ExampleToolCommandPatterns() {
	pats, _ := subjects.ToolCommandPatterns(subjects.DefaultVersion, "web_search")
	for _, p := range pats {
		fmt.Println(p)
	}
	// Output:
	// cg.v1r3.*.*.cmd.tool.web_search
	// cg.v1r3.*.*.cmd.tool.web_search.>
}

func ExampleWakeupPattern() {
	p, _ := subjects.WakeupPattern(subjects.DefaultVersion, "proj", "*", "planner")
	fmt.Println(p)
	// Output:
	// cg.v1r3.proj.*.cmd.agent.planner.wakeup
}

func ExampleParseTemplate() {
	t, err := subjects.ParseTemplate("cg.{PROTOCOL_VERSION}.{project_id}.{channel_id}.cmd.tool.web_search")
	if err != nil {
		panic(err)
	}
	s, _ := t.Render(subjects.DefaultVersion, "proj", "chan")
	fmt.Println(s)
	fmt.Println(t.Kind(), t.Matches("any", "other"))

	_, err = subjects.ParseTemplate("cg.{ver}.{project_id}.{channel_id}.cmd.tool.{tool}")
	var te *subjects.TokenError
	if errors.As(err, &te) {
		fmt.Println(te.Role, te.Token)
	}
	// Output:
	// cg.v1r3.proj.chan.cmd.tool.web_search
	// tool_command true
	// target {tool}
}
