package subjects

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func equalSubject(a, b Subject) bool {
	return a.Version == b.Version && a.Project == b.Project && a.Channel == b.Channel &&
		a.Category == b.Category && a.Component == b.Component && a.Target == b.Target &&
		slices.Equal(a.Suffix, b.Suffix)
}

// wantTokenErr checks that err is an invalid-subject error caused by a
// *TokenError with the given role and reason prefix.
func wantTokenErr(t *testing.T, err error, role, reason string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want %s: %s", role, reason)
	}
	if !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("error %q does not match ErrInvalidToken", err)
	}
	var te *TokenError
	if !errors.As(err, &te) {
		t.Fatalf("error %q has no *TokenError", err)
	}
	if te.Role != role || !strings.HasPrefix(te.Reason, reason) {
		t.Fatalf("got role %q reason %q, want role %q reason prefix %q (err %q)", te.Role, te.Reason, role, reason, err)
	}
}

func TestValidateToken(t *testing.T) {
	long := strings.Repeat("a", MaxTokenLen)
	tests := []struct {
		tok, reason string
	}{
		{"abc", ""},
		{"A-Z_09", ""},
		{long, ""},
		{"", "empty"},
		{long + "b", "too long (129 bytes, max 128)"},
		{"a.b", "invalid character '.' at byte 1"},
		{"*", "invalid character '*' at byte 0"},
		{">", "invalid character '>' at byte 0"},
		{"a b", "invalid character ' ' at byte 1"},
		{"ab\t", `invalid character '\t' at byte 2`},
		{"xé", "invalid character 'é' at byte 1"},
		{"x\xff", `invalid character '\xff' at byte 1`},
		{"{x}", "invalid character '{' at byte 0"},
	}
	for _, tt := range tests {
		err := ValidateToken("role", tt.tok)
		if tt.reason == "" {
			if err != nil {
				t.Errorf("ValidateToken(%q) = %v, want nil", tt.tok, err)
			}
			continue
		}
		wantTokenErr(t, err, "role", tt.reason)
		if err.(*TokenError).Reason != tt.reason {
			t.Errorf("ValidateToken(%q) reason %q, want %q", tt.tok, err.(*TokenError).Reason, tt.reason)
		}
		if errors.Is(err, ErrInvalidSubject) {
			t.Errorf("ValidateToken error matches ErrInvalidSubject")
		}
	}
}

func TestTokenErrorMessage(t *testing.T) {
	err := ValidateToken("project_id", "a b")
	if got, want := err.Error(), `invalid project_id "a b": invalid character ' ' at byte 1`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	_, err = Parse("cg.v1r3.a b.c.cmd.tool.x")
	if got, want := err.Error(), `subjects: invalid subject "cg.v1r3.a b.c.cmd.tool.x": invalid project_id "a b": invalid character ' ' at byte 1`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestParseValid(t *testing.T) {
	long := strings.Repeat("Z", MaxTokenLen)
	tests := []struct {
		in   string
		want Subject
		kind Kind
	}{
		{"cg.v1r3.p.c.cmd.tool.web_search", Subject{"v1r3", "p", "c", Cmd, Tool, "web_search", nil}, KindToolCommand},
		{"cg.v1r3.p.c.cmd.tool.x.a.b", Subject{"v1r3", "p", "c", Cmd, Tool, "x", []string{"a", "b"}}, KindToolCommand},
		{"cg.v1r3.p.c.cmd.sys.pmo.internal.t1", Subject{"v1r3", "p", "c", Cmd, Sys, "pmo", []string{"internal", "t1"}}, KindPMOInternal},
		{"cg.v1r3.p.c.cmd.sys.pmo.internal", Subject{"v1r3", "p", "c", Cmd, Sys, "pmo", []string{"internal"}}, KindOther},
		{"cg.v1r3.p.c.cmd.sys.pmo.internal.t.x", Subject{"v1r3", "p", "c", Cmd, Sys, "pmo", []string{"internal", "t", "x"}}, KindOther},
		{"cg.v1r3.p.c.cmd.sys.inbox.report", Subject{"v1r3", "p", "c", Cmd, Sys, "inbox", []string{"report"}}, KindInboxReport},
		{"cg.v1r3.p.c.evt.sys.inbox.report", Subject{"v1r3", "p", "c", Evt, Sys, "inbox", []string{"report"}}, KindOther},
		{"cg.v1r3.p.c.cmd.agent.a-1.wakeup", Subject{"v1r3", "p", "c", Cmd, Agent, "a-1", []string{"wakeup"}}, KindAgentWakeup},
		{"cg.v1r3.p.c.cmd.agent.a-1.wakeup.x", Subject{"v1r3", "p", "c", Cmd, Agent, "a-1", []string{"wakeup", "x"}}, KindOther},
		{"cg.v1r3.p.c.svc.cardstore.get", Subject{"v1r3", "p", "c", Svc, "cardstore", "get", nil}, KindService},
		{"cg.v1r3.p.c.evt.sys.deadletter.command", Subject{"v1r3", "p", "c", Evt, Sys, "deadletter", []string{"command"}}, KindDeadLetter},
		{"cg.v1r3.p.c.cmd.sys.deadletter.command", Subject{"v1r3", "p", "c", Cmd, Sys, "deadletter", []string{"command"}}, KindOther},
		{"cg.v1r3.p.c.str.user.u1.tokens", Subject{"v1r3", "p", "c", Str, User, "u1", []string{"tokens"}}, KindOther},
		{"cg.v2.P_1.C-2.evt.tool.t", Subject{"v2", "P_1", "C-2", Evt, Tool, "t", nil}, KindOther},
		{"cg." + long + ".p.c.cmd.tool.x", Subject{long, "p", "c", Cmd, Tool, "x", nil}, KindToolCommand},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if !equalSubject(got, tt.want) {
			t.Errorf("Parse(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
		if tt.want.Suffix == nil && got.Suffix != nil {
			t.Errorf("Parse(%q): Suffix not nil", tt.in)
		}
		if got.String() != tt.in {
			t.Errorf("String() = %q, want %q", got.String(), tt.in)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("Validate(%q): %v", tt.in, err)
		}
		if k := got.Kind(); k != tt.kind {
			t.Errorf("Kind(%q) = %v, want %v", tt.in, k, tt.kind)
		}
	}
}

func TestParseInvalid(t *testing.T) {
	long := strings.Repeat("a", MaxTokenLen+1)
	tests := []struct {
		in, role, reason string
	}{
		{"xg.v1r3.p.c.cmd.tool.x", "prefix", `must be "cg"`},
		{"CG.v1r3.p.c.cmd.tool.x", "prefix", `must be "cg"`},
		{".v1r3.p.c.cmd.tool.x", "prefix", "empty"},
		{"cg..p.c.cmd.tool.x", "ver", "empty"},
		{"cg.v1r3..c.cmd.tool.x", "project_id", "empty"},
		{"cg.v1r3.p..cmd.tool.x", "channel_id", "empty"},
		{"cg.v1r3.p.c..tool.x", "category", "empty"},
		{"cg.v1r3.p.c.cmd..x", "component", "empty"},
		{"cg.v1r3.p.c.cmd.tool.", "target", "empty"},
		{"cg.v1r3.p.c.cmd.tool.x.", "suffix[0]", "empty"},
		{"cg.v1r3.p.c.cmd.tool.x.a..b", "suffix[1]", "empty"},
		{"cg.v1r3.p.c.cmd.tool.x.a.b c", "suffix[1]", "invalid character ' ' at byte 1"},
		{"cg.v1r3.p.c.cmd.tool.x.a.>", "suffix[1]", "invalid character '>' at byte 0"},
		{"cg.v1r3.*.c.cmd.tool.x", "project_id", "invalid character '*' at byte 0"},
		{"cg.v1r3.p.c-\x00.cmd.tool.x", "channel_id", `invalid character '\x00' at byte 2`},
		{"cg." + long + ".p.c.cmd.tool.x", "ver", "too long (129 bytes, max 128)"},
		{"cg.v1r3.p.c.cmd.tool." + long, "target", "too long"},
		{"cg.v1r3.p.c.CMD.tool.x", "category", "unknown category"},
		{"cg.v1r3.p.c.req.tool.x", "category", "unknown category"},
		{"cg.v1r3.p.c.cmd.tools.x", "component", "unknown component"},
		{"cg.v1r3.p.c.evt.svc.x", "component", "unknown component"},
		{"cg.v1r3.p.c.svc.card store.get", "service", "invalid character ' ' at byte 4"},
		{"cg.v1r3.p.c.svc.cardstore.", "op", "empty"},
		{"cg.v1r3.p.c.cmd.tool.x.ünï", "suffix[0]", "invalid character 'ü' at byte 0"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.in)
		if !errors.Is(err, ErrInvalidSubject) {
			t.Errorf("Parse(%q) error %v does not match ErrInvalidSubject", tt.in, err)
			continue
		}
		wantTokenErr(t, err, tt.role, tt.reason)
	}
}

func TestParseStructural(t *testing.T) {
	for _, in := range []string{
		"", "cg", "cg.v1r3.p.c.cmd.tool", "cg.v1r3.p.c.svc.cardstore.get.extra", "......",
	} {
		_, err := Parse(in)
		if !errors.Is(err, ErrInvalidSubject) {
			t.Errorf("Parse(%q) = %v, want ErrInvalidSubject", in, err)
		}
		if in != "......" && errors.Is(err, ErrInvalidToken) {
			t.Errorf("Parse(%q) = %v, want a structural error", in, err)
		}
	}
}

func TestValidateStruct(t *testing.T) {
	ok := Subject{"v1r3", "p", "c", Cmd, Tool, "x", nil}
	tests := []struct {
		mod          func(*Subject)
		role, reason string
	}{
		{func(s *Subject) { s.Version = "" }, "ver", "empty"},
		{func(s *Subject) { s.Project = "a.b" }, "project_id", "invalid character '.' at byte 1"},
		{func(s *Subject) { s.Channel = "*" }, "channel_id", "invalid character '*'"},
		{func(s *Subject) { s.Category = "" }, "category", "empty"},
		{func(s *Subject) { s.Category = "foo" }, "category", "unknown category"},
		{func(s *Subject) { s.Component = "robot" }, "component", "unknown component"},
		{func(s *Subject) { s.Target = "" }, "target", "empty"},
		{func(s *Subject) { s.Suffix = []string{"a", ""} }, "suffix[1]", "empty"},
		{func(s *Subject) { s.Category = Svc; s.Component = "" }, "service", "empty"},
		{func(s *Subject) { s.Category = Svc; s.Target = "a b" }, "op", "invalid character ' '"},
	}
	for i, tt := range tests {
		s := ok
		tt.mod(&s)
		err := s.Validate()
		if !errors.Is(err, ErrInvalidSubject) {
			t.Errorf("%d: Validate() = %v, want ErrInvalidSubject", i, err)
			continue
		}
		wantTokenErr(t, err, tt.role, tt.reason)
	}
	s := Subject{"v1r3", "p", "c", Svc, "cardstore", "get", []string{"x"}}
	if err := s.Validate(); !errors.Is(err, ErrInvalidSubject) || errors.Is(err, ErrInvalidToken) {
		t.Errorf("svc with suffix: Validate() = %v", err)
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
}

func TestKindString(t *testing.T) {
	want := map[Kind]string{
		KindOther: "other", KindToolCommand: "tool_command", KindPMOInternal: "pmo_internal",
		KindInboxReport: "inbox_report", KindAgentWakeup: "agent_wakeup", KindService: "service",
		KindDeadLetter: "dead_letter", Kind(99): "Kind(99)",
	}
	for k, w := range want {
		if k.String() != w {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), k.String(), w)
		}
	}
}

func TestBuilders(t *testing.T) {
	const v = DefaultVersion
	must := func(s Subject, err error) Subject {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		s    Subject
		want string
		kind Kind
	}{
		{must(ToolCommand(v, "p", "c", "web_search")), "cg.v1r3.p.c.cmd.tool.web_search", KindToolCommand},
		{must(ToolCommand(v, "p", "c", "x", "a", "b")), "cg.v1r3.p.c.cmd.tool.x.a.b", KindToolCommand},
		{must(PMOInternal(v, "p", "c", "t1")), "cg.v1r3.p.c.cmd.sys.pmo.internal.t1", KindPMOInternal},
		{must(InboxReport(v, "p", "c")), "cg.v1r3.p.c.cmd.sys.inbox.report", KindInboxReport},
		{must(AgentWakeup(v, "p", "c", "ag")), "cg.v1r3.p.c.cmd.agent.ag.wakeup", KindAgentWakeup},
		{must(Service(v, "p", "c", "cardstore", "get")), "cg.v1r3.p.c.svc.cardstore.get", KindService},
		{must(DeadLetter(v, "p", "c")), "cg.v1r3.p.c.evt.sys.deadletter.command", KindDeadLetter},
		{must(Event(v, "p", "c", User, "u1", "joined")), "cg.v1r3.p.c.evt.user.u1.joined", KindOther},
		{must(Event(v, "p", "c", Agent, "a")), "cg.v1r3.p.c.evt.agent.a", KindOther},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
		if tt.s.Kind() != tt.kind {
			t.Errorf("%s: Kind() = %v, want %v", tt.want, tt.s.Kind(), tt.kind)
		}
		p, err := Parse(tt.want)
		if err != nil || !equalSubject(p, tt.s) {
			t.Errorf("Parse(%q) = %#v, %v; want %#v", tt.want, p, err, tt.s)
		}
	}

	if tool, ok := tests[2].s.PMOTool(); !ok || tool != "t1" {
		t.Errorf("PMOTool() = %q, %v", tool, ok)
	}
	if id, ok := tests[4].s.AgentID(); !ok || id != "ag" {
		t.Errorf("AgentID() = %q, %v", id, ok)
	}
	if _, ok := tests[0].s.PMOTool(); ok {
		t.Error("PMOTool() ok on a tool command")
	}
	if _, ok := tests[0].s.AgentID(); ok {
		t.Error("AgentID() ok on a tool command")
	}

	// The variadic suffix is copied.
	suf := []string{"a"}
	s := must(ToolCommand(v, "p", "c", "x", suf...))
	suf[0] = "changed"
	if s.Suffix[0] != "a" {
		t.Error("ToolCommand aliases its suffix argument")
	}
	if s := must(ToolCommand(v, "p", "c", "x", []string{}...)); s.Suffix != nil {
		t.Error("empty suffix not normalised to nil")
	}
}

func TestBuilderErrors(t *testing.T) {
	const v = DefaultVersion
	tests := []struct {
		name         string
		err          error
		role, reason string
	}{
		{"ToolCommand ver", second(ToolCommand("", "p", "c", "x")), "ver", "empty"},
		{"ToolCommand target", second(ToolCommand(v, "p", "c", "a.b")), "target", "invalid character '.'"},
		{"ToolCommand suffix", second(ToolCommand(v, "p", "c", "x", "ok", "*")), "suffix[1]", "invalid character '*'"},
		{"PMOInternal tool", second(PMOInternal(v, "p", "c", "")), "tool", "empty"},
		{"PMOInternal project", second(PMOInternal(v, "p q", "c", "t")), "project_id", "invalid character ' '"},
		{"InboxReport channel", second(InboxReport(v, "p", "")), "channel_id", "empty"},
		{"AgentWakeup id", second(AgentWakeup(v, "p", "c", ">")), "agent_id", "invalid character '>'"},
		{"Service service", second(Service(v, "p", "c", "", "get")), "service", "empty"},
		{"Service op", second(Service(v, "p", "c", "cs", "g.t")), "op", "invalid character '.'"},
		{"DeadLetter ver", second(DeadLetter("v 1", "p", "c")), "ver", "invalid character ' '"},
		{"Event component", second(Event(v, "p", "c", "bot", "x")), "component", "unknown component"},
		{"Event suffix", second(Event(v, "p", "c", Sys, "x", "")), "suffix[0]", "empty"},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, ErrInvalidSubject) {
			t.Errorf("%s: %v does not match ErrInvalidSubject", tt.name, tt.err)
			continue
		}
		wantTokenErr(t, tt.err, tt.role, tt.reason)
	}
}

func second[T any](_ T, err error) error { return err }

func TestPatterns(t *testing.T) {
	const v = DefaultVersion
	str := func(s string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct{ got, want string }{
		{str(AllCommands(v)), "cg.v1r3.*.*.cmd.>"},
		{str(AllEvents(v)), "cg.v1r3.*.*.evt.>"},
		{str(PMOInternalPattern(v)), "cg.v1r3.*.*.cmd.sys.pmo.internal.*"},
		{str(InboxReportPattern(v)), "cg.v1r3.*.*.cmd.sys.inbox.report"},
		{str(WakeupPattern(v, "*", "*", "*")), "cg.v1r3.*.*.cmd.agent.*.wakeup"},
		{str(WakeupPattern(v, "p", "*", "a1")), "cg.v1r3.p.*.cmd.agent.a1.wakeup"},
		{str(ServicePattern(v, "cardstore")), "cg.v1r3.*.*.svc.cardstore.*"},
		{str(ServiceOpPattern(v, "worker", "echo")), "cg.v1r3.*.*.svc.worker.echo"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	pats, err := ToolCommandPatterns(v, "web_search")
	if err != nil || !slices.Equal(pats, []string{"cg.v1r3.*.*.cmd.tool.web_search", "cg.v1r3.*.*.cmd.tool.web_search.>"}) {
		t.Errorf("ToolCommandPatterns = %q, %v", pats, err)
	}

	errs := []struct {
		err          error
		role, reason string
	}{
		{second(AllCommands("")), "ver", "empty"},
		{second(AllEvents("*")), "ver", "invalid character '*'"},
		{second(PMOInternalPattern("a.b")), "ver", "invalid character '.'"},
		{second(InboxReportPattern(">")), "ver", "invalid character '>'"},
		{second(ToolCommandPatterns(v, "*")), "target", "invalid character '*'"},
		{second(ToolCommandPatterns("", "x")), "ver", "empty"},
		{second(WakeupPattern("*", "p", "c", "a")), "ver", "invalid character '*'"},
		{second(WakeupPattern(v, "p*", "c", "a")), "project_id", "invalid character '*'"},
		{second(WakeupPattern(v, "p", ">", "a")), "channel_id", "invalid character '>'"},
		{second(WakeupPattern(v, "p", "c", "")), "agent_id", "empty"},
		{second(ServicePattern(v, "*")), "service", "invalid character '*'"},
		{second(ServiceOpPattern(v, "worker", "a.b")), "op", "invalid character '.'"},
	}
	for _, tt := range errs {
		wantTokenErr(t, tt.err, tt.role, tt.reason)
	}
}

// TestPatternsMatch checks the patterns against built subjects with a tiny
// NATS-style matcher.
func TestPatternsMatch(t *testing.T) {
	const v = DefaultVersion
	tc, _ := ToolCommand(v, "p", "c", "x")
	tcs, _ := ToolCommand(v, "p", "c", "x", "a")
	pats, _ := ToolCommandPatterns(v, "x")
	if !natsMatch(pats[0], tc.String()) || natsMatch(pats[0], tcs.String()) {
		t.Error("tool pattern 0")
	}
	if natsMatch(pats[1], tc.String()) || !natsMatch(pats[1], tcs.String()) {
		t.Error("tool pattern 1")
	}
	svc, _ := Service(v, "p", "c", "cardstore", "get")
	all, _ := AllCommands(v)
	if natsMatch(all, svc.String()) {
		t.Error("AllCommands captures a svc subject")
	}
	sp, _ := ServicePattern(v, "cardstore")
	if !natsMatch(sp, svc.String()) {
		t.Error("ServicePattern does not match")
	}
	pmo, _ := PMOInternal(v, "p", "c", "t")
	pp, _ := PMOInternalPattern(v)
	if !natsMatch(pp, pmo.String()) || !natsMatch(all, pmo.String()) {
		t.Error("PMOInternalPattern does not match")
	}
	ib, _ := InboxReport(v, "p", "c")
	ip, _ := InboxReportPattern(v)
	if !natsMatch(ip, ib.String()) {
		t.Error("InboxReportPattern does not match")
	}
	wk, _ := AgentWakeup(v, "p", "c", "a1")
	wp, _ := WakeupPattern(v, "p", "*", "a1")
	if !natsMatch(wp, wk.String()) {
		t.Error("WakeupPattern does not match")
	}
	dl, _ := DeadLetter(v, "p", "c")
	ae, _ := AllEvents(v)
	if !natsMatch(ae, dl.String()) || natsMatch(all, dl.String()) {
		t.Error("AllEvents")
	}
}

func natsMatch(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(p) == len(s)
}

func TestTemplate(t *testing.T) {
	tests := []struct {
		in       string
		kind     Kind
		render   [3]string
		want     string
		matchP   string
		matchC   string
		matches  bool
		noRender bool
	}{
		{"cg.{ver}.{project_id}.{channel_id}.cmd.tool.web_search", KindToolCommand,
			[3]string{"v1r3", "p", "c"}, "cg.v1r3.p.c.cmd.tool.web_search", "any", "thing", true, false},
		{"cg.{PROTOCOL_VERSION}.{project_id}.{channel_id}.cmd.sys.pmo.internal.t", KindPMOInternal,
			[3]string{"v2", "p", "c"}, "cg.v2.p.c.cmd.sys.pmo.internal.t", "p", "c", true, false},
		{"cg.v1r3.proj.{channel_id}.cmd.agent.a.wakeup", KindAgentWakeup,
			[3]string{"", "", "c"}, "cg.v1r3.proj.c.cmd.agent.a.wakeup", "other", "c", false, false},
		{"cg.v1r3.proj.chan.svc.cardstore.get", KindService,
			[3]string{"v1r3", "proj", "chan"}, "cg.v1r3.proj.chan.svc.cardstore.get", "proj", "chan", true, false},
		{"cg.v1r3.proj.chan.evt.sys.deadletter.command", KindDeadLetter,
			[3]string{"v9", "", ""}, "", "proj", "other", false, true},
		{"cg.{ver}.proj.{channel_id}.cmd.tool.x", KindToolCommand,
			[3]string{"v1r3", "other", "c"}, "", "proj", "zzz", true, true},
	}
	for _, tt := range tests {
		tpl, err := ParseTemplate(tt.in)
		if err != nil {
			t.Errorf("ParseTemplate(%q): %v", tt.in, err)
			continue
		}
		if tpl.String() != tt.in {
			t.Errorf("String() = %q", tpl.String())
		}
		if tpl.Kind() != tt.kind {
			t.Errorf("%q: Kind() = %v, want %v", tt.in, tpl.Kind(), tt.kind)
		}
		if got := tpl.Matches(tt.matchP, tt.matchC); got != tt.matches {
			t.Errorf("%q: Matches(%q, %q) = %v", tt.in, tt.matchP, tt.matchC, got)
		}
		s, err := tpl.Render(tt.render[0], tt.render[1], tt.render[2])
		if tt.noRender {
			if !errors.Is(err, ErrInvalidSubject) {
				t.Errorf("%q: Render%q = %v, want error", tt.in, tt.render, err)
			}
			continue
		}
		if err != nil || s.String() != tt.want {
			t.Errorf("%q: Render%q = %q, %v; want %q", tt.in, tt.render, s, err, tt.want)
		}
		if s.Kind() != tt.kind {
			t.Errorf("rendered kind %v", s.Kind())
		}
	}

	// Rendered suffixes do not alias the template.
	tpl, _ := ParseTemplate("cg.{ver}.{project_id}.{channel_id}.cmd.tool.x.a")
	s1, _ := tpl.Render("v", "p", "c")
	s1.Suffix[0] = "changed"
	if s2, _ := tpl.Render("v", "p", "c"); s2.Suffix[0] != "a" {
		t.Error("Render aliases the template suffix")
	}
	// Empty arguments for placeholders are rejected.
	tpl, _ = ParseTemplate("cg.{ver}.{project_id}.{channel_id}.cmd.tool.x")
	_, err := tpl.Render("v", "", "c")
	wantTokenErr(t, err, "project_id", "empty")

	var zero Template
	if _, err := zero.Render("v", "p", "c"); !errors.Is(err, ErrInvalidSubject) {
		t.Errorf("zero Render = %v", err)
	}
	if zero.Matches("p", "c") || zero.Kind() != KindOther || zero.String() != "" {
		t.Error("zero Template")
	}
}

func TestTemplateInvalid(t *testing.T) {
	tests := []struct {
		in, role, reason string
	}{
		{"cg.{project_id}.{project_id}.{channel_id}.cmd.tool.x", "ver", "placeholder not allowed"},
		{"cg.{ver}.{channel_id}.{channel_id}.cmd.tool.x", "project_id", "placeholder not allowed"},
		{"cg.{ver}.{project_id}.{ver}.cmd.tool.x", "channel_id", "placeholder not allowed"},
		{"cg.{ver}.{project_id}.{channel_id}.cmd.tool.{tool}", "target", "placeholder not allowed"},
		{"cg.{ver}.{project_id}.{channel_id}.cmd.{x}.y", "component", "placeholder not allowed"},
		{"{cg}.{ver}.{project_id}.{channel_id}.cmd.tool.x", "prefix", "placeholder not allowed"},
		{"cg.{VER}.{project_id}.{channel_id}.cmd.tool.x", "ver", "placeholder not allowed"},
		{"cg.{ver}.{project_id}.{channel_id}.cmd.tool.x.{a}", "suffix[0]", "placeholder not allowed"},
		{"cg.{ver}x.{project_id}.{channel_id}.cmd.tool.x", "ver", "invalid character '{' at byte 0"},
		{"cg.{ver}.{project_id}.{channel_id}.cmd.tool.a b", "target", "invalid character ' '"},
		{"cg.{ver}.{project_id}.{channel_id}.bad.tool.x", "category", "unknown category"},
		{"cg.{ver}..{channel_id}.cmd.tool.x", "project_id", "empty"},
	}
	for _, tt := range tests {
		_, err := ParseTemplate(tt.in)
		if !errors.Is(err, ErrInvalidSubject) {
			t.Errorf("ParseTemplate(%q) = %v, want ErrInvalidSubject", tt.in, err)
			continue
		}
		wantTokenErr(t, err, tt.role, tt.reason)
	}
	for _, in := range []string{"", "cg.{ver}.{project_id}.{channel_id}.cmd.tool", "cg.{ver}.{project_id}.{channel_id}.svc.a.b.c"} {
		if _, err := ParseTemplate(in); !errors.Is(err, ErrInvalidSubject) || errors.Is(err, ErrInvalidToken) {
			t.Errorf("ParseTemplate(%q) = %v, want structural error", in, err)
		}
	}
}

func TestParseAllocs(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = Parse("cg.v1r3.proj.chan.cmd.tool.web_search")
	})
	if allocs != 0 {
		t.Errorf("Parse without suffix allocates %v times, want 0", allocs)
	}
}

func BenchmarkParse(b *testing.B) {
	const s = "cg.v1r3.project-42.channel_7.cmd.sys.pmo.internal.web_search"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(s); err != nil {
			b.Fatal(err)
		}
	}
}

func TestStateEvent(t *testing.T) {
	s, err := StateEvent(DefaultVersion, "demo", "atp", "0194f0c2-7d3e-7b1a-9e2f-3a4b5c6d7e8f")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.String(), "cg.v1r3.demo.state.evt.tool.atp.state.0194f0c2-7d3e-7b1a-9e2f-3a4b5c6d7e8f"; got != want {
		t.Fatalf("StateEvent = %s, want %s", got, want)
	}
	p, err := StateEventPattern(DefaultVersion, "demo", "*", "*")
	if err != nil || p != "cg.v1r3.demo.state.evt.tool.*.state.*" {
		t.Fatalf("StateEventPattern = %q, %v", p, err)
	}
	for _, bad := range []struct{ project, resource string }{{"de.mo", "b"}, {"demo", "a.b"}, {"demo", ""}} {
		if _, err := StateEvent(DefaultVersion, bad.project, "atp", bad.resource); err == nil {
			t.Errorf("StateEvent(%q, %q): no error", bad.project, bad.resource)
		}
		if _, err := StateEventPattern(DefaultVersion, bad.project, "atp", bad.resource); err == nil {
			t.Errorf("StateEventPattern(%q, %q): no error", bad.project, bad.resource)
		}
	}
}
