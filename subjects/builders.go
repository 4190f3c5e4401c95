package subjects

import (
	"fmt"
	"strconv"
)

// build validates sub and returns it, wrapping errors like Validate.
func build(sub Subject) (Subject, error) {
	if err := sub.Validate(); err != nil {
		return Subject{}, err
	}
	return sub, nil
}

// buildErr wraps a token error raised by a builder argument check.
func buildErr(e *TokenError) error {
	return fmt.Errorf("%w: %w", ErrInvalidSubject, e)
}

// cloneSuffix copies a variadic suffix so the returned Subject never aliases
// the caller's slice; an empty suffix becomes nil, as after Parse.
func cloneSuffix(suffix []string) []string {
	if len(suffix) == 0 {
		return nil
	}
	return append([]string(nil), suffix...)
}

// ToolCommand builds cg.<ver>.<project>.<channel>.cmd.tool.<target>[.<suffix>…],
// the command a tool worker consumes.
func ToolCommand(ver, project, channel, target string, suffix ...string) (Subject, error) {
	return build(Subject{
		Version: ver, Project: project, Channel: channel,
		Category: Cmd, Component: Tool, Target: target,
		Suffix: cloneSuffix(suffix),
	})
}

// PMOInternal builds cg.<ver>.<project>.<channel>.cmd.sys.pmo.internal.<tool>
// (component sys, target "pmo", suffix ["internal", tool]). An invalid tool
// is reported with role "tool".
func PMOInternal(ver, project, channel, tool string) (Subject, error) {
	if e := checkToken("tool", tool); e != nil {
		return Subject{}, buildErr(e)
	}
	return build(Subject{
		Version: ver, Project: project, Channel: channel,
		Category: Cmd, Component: Sys, Target: "pmo",
		Suffix: []string{"internal", tool},
	})
}

// InboxReport builds cg.<ver>.<project>.<channel>.cmd.sys.inbox.report.
func InboxReport(ver, project, channel string) (Subject, error) {
	return build(Subject{
		Version: ver, Project: project, Channel: channel,
		Category: Cmd, Component: Sys, Target: "inbox",
		Suffix: []string{"report"},
	})
}

// InboxReportRequest builds cg.<ver>.<project>.<channel>.svc.inbox.report,
// where a worker sends a report as a request and the inbox answers once
// the entry is durable (the report's other path, InboxReport, stores it in
// the command stream first).
func InboxReportRequest(ver, project, channel string) (Subject, error) {
	return Service(ver, project, channel, "inbox", "report")
}

// AgentWakeup builds cg.<ver>.<project>.<channel>.cmd.agent.<agent_id>.wakeup.
// An invalid agentID is reported with role "agent_id".
func AgentWakeup(ver, project, channel, agentID string) (Subject, error) {
	if e := checkToken("agent_id", agentID); e != nil {
		return Subject{}, buildErr(e)
	}
	return build(Subject{
		Version: ver, Project: project, Channel: channel,
		Category: Cmd, Component: Agent, Target: agentID,
		Suffix: []string{"wakeup"},
	})
}

// Service builds cg.<ver>.<project>.<channel>.svc.<service>.<op>, the
// core-NATS request-reply subject of a mesh service. The service name is
// stored in the Component field and op in Target.
func Service(ver, project, channel, service, op string) (Subject, error) {
	return build(Subject{
		Version: ver, Project: project, Channel: channel,
		Category: Svc, Component: Component(service), Target: op,
	})
}

// DeadLetter builds cg.<ver>.<project>.<channel>.evt.sys.deadletter.command,
// the event published when a command is dead-lettered.
func DeadLetter(ver, project, channel string) (Subject, error) {
	return build(Subject{
		Version: ver, Project: project, Channel: channel,
		Category: Evt, Component: Sys, Target: "deadletter",
		Suffix: []string{"command"},
	})
}

// Event builds a generic event subject
// cg.<ver>.<project>.<channel>.evt.<component>.<target>[.<suffix>…].
// component must be one of Agent, Sys, User, Tool.
func Event(ver, project, channel string, component Component, target string, suffix ...string) (Subject, error) {
	return build(Subject{
		Version: ver, Project: project, Channel: channel,
		Category: Evt, Component: component, Target: target,
		Suffix: cloneSuffix(suffix),
	})
}

// Kind classifies well-known subject shapes.
type Kind int

// The well-known kinds. KindOther is any valid subject that is none of the
// others.
const (
	// KindOther is any subject not matching a well-known shape.
	KindOther Kind = iota
	// KindToolCommand is cmd.tool.<target>[.<suffix>…].
	KindToolCommand
	// KindPMOInternal is cmd.sys.pmo.internal.<tool>.
	KindPMOInternal
	// KindInboxReport is cmd.sys.inbox.report.
	KindInboxReport
	// KindAgentWakeup is cmd.agent.<agent_id>.wakeup.
	KindAgentWakeup
	// KindService is svc.<service>.<op>.
	KindService
	// KindDeadLetter is evt.sys.deadletter.command.
	KindDeadLetter
)

// String returns a snake_case name such as "tool_command", or "Kind(N)"
// for an unknown value.
func (k Kind) String() string {
	switch k {
	case KindOther:
		return "other"
	case KindToolCommand:
		return "tool_command"
	case KindPMOInternal:
		return "pmo_internal"
	case KindInboxReport:
		return "inbox_report"
	case KindAgentWakeup:
		return "agent_wakeup"
	case KindService:
		return "service"
	case KindDeadLetter:
		return "dead_letter"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Kind classifies s by its category, component, target and suffix (the
// version, project and channel do not matter). It does not validate s; the
// result is meaningful for valid subjects only.
func (s Subject) Kind() Kind {
	switch s.Category {
	case Svc:
		return KindService
	case Cmd:
		switch s.Component {
		case Tool:
			return KindToolCommand
		case Sys:
			if s.Target == "pmo" && len(s.Suffix) == 2 && s.Suffix[0] == "internal" {
				return KindPMOInternal
			}
			if s.Target == "inbox" && len(s.Suffix) == 1 && s.Suffix[0] == "report" {
				return KindInboxReport
			}
		case Agent:
			if len(s.Suffix) == 1 && s.Suffix[0] == "wakeup" {
				return KindAgentWakeup
			}
		}
	case Evt:
		if s.Component == Sys && s.Target == "deadletter" && len(s.Suffix) == 1 && s.Suffix[0] == "command" {
			return KindDeadLetter
		}
	}
	return KindOther
}

// PMOTool returns the tool name of a cmd.sys.pmo.internal.<tool> subject.
// ok is false for any other kind.
func (s Subject) PMOTool() (tool string, ok bool) {
	if s.Kind() != KindPMOInternal {
		return "", false
	}
	return s.Suffix[1], true
}

// AgentID returns the agent id of a cmd.agent.<agent_id>.wakeup subject.
// ok is false for any other kind.
func (s Subject) AgentID() (agentID string, ok bool) {
	if s.Kind() != KindAgentWakeup {
		return "", false
	}
	return s.Target, true
}
