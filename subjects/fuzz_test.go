package subjects

import (
	"errors"
	"strings"
	"testing"
)

var parseSeeds = []string{
	"",
	".",
	"cg",
	"cg.v1r3.p.c.cmd.tool.web_search",
	"cg.v1r3.p.c.cmd.tool.x.a.b.c",
	"cg.v1r3.p.c.cmd.sys.pmo.internal.t",
	"cg.v1r3.p.c.cmd.sys.inbox.report",
	"cg.v1r3.p.c.cmd.agent.a.wakeup",
	"cg.v1r3.p.c.svc.cardstore.get",
	"cg.v1r3.p.c.svc.cardstore.get.x",
	"cg.v1r3.p.c.evt.sys.deadletter.command",
	"cg.v1r3.p.c.str.user.u.tokens",
	"cg.v1r3.*.*.cmd.>",
	"cg.v1r3.p.c.cmd.tool.",
	"cg..p.c.cmd.tool.x",
	"cg.v1r3.p.c.cmd.tool.x\xff",
	"cg.v1r3.p.c.cmd.tool.\u00e9",
	"cg." + strings.Repeat("a", 129) + ".p.c.cmd.tool.x",
}

func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := Parse(in)
		if err != nil {
			if !errors.Is(err, ErrInvalidSubject) {
				t.Fatalf("Parse(%q) error %v does not match ErrInvalidSubject", in, err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Parse(%q) ok but Validate: %v", in, err)
		}
		out := s.String()
		if out != in {
			t.Fatalf("String() = %q, want %q", out, in)
		}
		s2, err := Parse(out)
		if err != nil || !equalSubject(s, s2) {
			t.Fatalf("reparse %q = %#v, %v; want %#v", out, s2, err, s)
		}
		_ = s.Kind().String()
		if _, ok := s.PMOTool(); ok != (s.Kind() == KindPMOInternal) {
			t.Fatal("PMOTool inconsistent with Kind")
		}
		if _, ok := s.AgentID(); ok != (s.Kind() == KindAgentWakeup) {
			t.Fatal("AgentID inconsistent with Kind")
		}
	})
}

func FuzzTemplate(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add(s, "v1r3", "p", "c")
	}
	f.Add("cg.{ver}.{project_id}.{channel_id}.cmd.tool.x", "v1r3", "p", "c")
	f.Add("cg.{PROTOCOL_VERSION}.{project_id}.{channel_id}.svc.cs.get", "v", "p", "")
	f.Add("cg.v1r3.proj.{channel_id}.cmd.agent.a.wakeup", "", "proj", "c")
	f.Add("cg.{ver}.{channel_id}.{project_id}.cmd.tool.x", "v", "p", "c")
	f.Add("cg.{ver}.{project_id}.{channel_id}.cmd.tool.{x}", "v", "p", "c")
	f.Fuzz(func(t *testing.T, in, ver, project, channel string) {
		tpl, err := ParseTemplate(in)
		if err != nil {
			if !errors.Is(err, ErrInvalidSubject) {
				t.Fatalf("ParseTemplate(%q) error %v does not match ErrInvalidSubject", in, err)
			}
			return
		}
		if tpl.String() != in {
			t.Fatalf("String() = %q, want %q", tpl.String(), in)
		}
		tpl2, err := ParseTemplate(tpl.String())
		if err != nil || tpl2.String() != tpl.String() || tpl2.Kind() != tpl.Kind() {
			t.Fatalf("reparse of %q: %v", in, err)
		}
		// A concrete subject is a template of itself.
		if s, err := Parse(in); err == nil {
			if tpl.Kind() != s.Kind() || !tpl.Matches(s.Project, s.Channel) {
				t.Fatalf("template %q disagrees with its subject", in)
			}
		}
		// Arbitrary arguments: Render may fail, but a success is valid,
		// matches the template and has the template's kind.
		s, err := tpl.Render(ver, project, channel)
		if err != nil {
			if !errors.Is(err, ErrInvalidSubject) {
				t.Fatalf("Render error %v does not match ErrInvalidSubject", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Render returned invalid subject: %v", err)
		}
		if s.Kind() != tpl.Kind() || !tpl.Matches(s.Project, s.Channel) {
			t.Fatalf("Render(%q,%q,%q) of %q = %q: kind/match mismatch", ver, project, channel, in, s)
		}
		if _, err := Parse(s.String()); err != nil {
			t.Fatalf("rendered %q does not parse: %v", s, err)
		}
	})
}
