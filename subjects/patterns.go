package subjects

// Wildcard patterns for NATS subscriptions and JetStream consumer filters.
// Every function validates its arguments with the token rules and returns
// the *TokenError (matching ErrInvalidToken) of the first bad one. Patterns
// fix the version: a subscriber only sees subjects of its own protocol
// version.

const wildcard = "*"

// AllCommands returns cg.<ver>.*.*.cmd.>, every command of version ver in
// every project and channel.
func AllCommands(ver string) (string, error) {
	if e := checkToken("ver", ver); e != nil {
		return "", e
	}
	return prefix + "." + ver + ".*.*.cmd.>", nil
}

// StreamCommands returns the patterns of the command stream: every tool
// command and every sys command (PMO built-ins, inbox reports) of version
// ver in every project and channel:
//
//	cg.<ver>.*.*.cmd.tool.>
//	cg.<ver>.*.*.cmd.sys.>
//
// Agent commands (wakeups) are not among them: they have a stream of their
// own (AgentCommands), so their writes do not queue behind tool commands.
func StreamCommands(ver string) ([]string, error) {
	if e := checkToken("ver", ver); e != nil {
		return nil, e
	}
	p := prefix + "." + ver + ".*.*.cmd."
	return []string{p + "tool.>", p + "sys.>"}, nil
}

// AgentCommands returns cg.<ver>.*.*.cmd.agent.>, every agent command
// (wakeup) of version ver in every project and channel.
func AgentCommands(ver string) (string, error) {
	if e := checkToken("ver", ver); e != nil {
		return "", e
	}
	return prefix + "." + ver + ".*.*.cmd.agent.>", nil
}

// AllEvents returns cg.<ver>.*.*.evt.>, every event of version ver in every
// project and channel.
func AllEvents(ver string) (string, error) {
	if e := checkToken("ver", ver); e != nil {
		return "", e
	}
	return prefix + "." + ver + ".*.*.evt.>", nil
}

// ToolCommandPatterns returns the two patterns a worker serving tool target
// in every project and channel subscribes to:
//
//	cg.<ver>.*.*.cmd.tool.<target>
//	cg.<ver>.*.*.cmd.tool.<target>.>
//
// Both are needed because NATS ">" matches one or more tokens, never zero.
func ToolCommandPatterns(ver, target string) ([]string, error) {
	if e := checkToken("ver", ver); e != nil {
		return nil, e
	}
	if e := checkToken("target", target); e != nil {
		return nil, e
	}
	base := prefix + "." + ver + ".*.*.cmd.tool." + target
	return []string{base, base + ".>"}, nil
}

// PMOInternalPattern returns cg.<ver>.*.*.cmd.sys.pmo.internal.*, every PMO
// internal tool command.
func PMOInternalPattern(ver string) (string, error) {
	if e := checkToken("ver", ver); e != nil {
		return "", e
	}
	return prefix + "." + ver + ".*.*.cmd.sys.pmo.internal.*", nil
}

// InboxReportRequestPattern returns cg.<ver>.*.*.svc.inbox.report, every
// report sent to the inbox as a request.
func InboxReportRequestPattern(ver string) (string, error) {
	if e := checkToken("ver", ver); e != nil {
		return "", e
	}
	return prefix + "." + ver + ".*.*.svc.inbox.report", nil
}

// InboxReportPattern returns cg.<ver>.*.*.cmd.sys.inbox.report.
func InboxReportPattern(ver string) (string, error) {
	if e := checkToken("ver", ver); e != nil {
		return "", e
	}
	return prefix + "." + ver + ".*.*.cmd.sys.inbox.report", nil
}

// WakeupPattern returns cg.<ver>.<project>.<channel>.cmd.agent.<agent_id>.wakeup.
// Each of project, channel and agentID is either a valid token or "*"
// (match any); ver must be a valid token.
func WakeupPattern(ver, project, channel, agentID string) (string, error) {
	if e := checkToken("ver", ver); e != nil {
		return "", e
	}
	if e := checkTokenOrWildcard("project_id", project); e != nil {
		return "", e
	}
	if e := checkTokenOrWildcard("channel_id", channel); e != nil {
		return "", e
	}
	if e := checkTokenOrWildcard("agent_id", agentID); e != nil {
		return "", e
	}
	return prefix + "." + ver + "." + project + "." + channel + ".cmd.agent." + agentID + ".wakeup", nil
}

// ServicePattern returns cg.<ver>.*.*.svc.<service>.*, every operation of
// service in every project and channel (a service instance serving the
// whole mesh).
func ServicePattern(ver, service string) (string, error) {
	if e := checkToken("ver", ver); e != nil {
		return "", e
	}
	if e := checkToken("service", service); e != nil {
		return "", e
	}
	return prefix + "." + ver + ".*.*.svc." + service + ".*", nil
}

// ServiceOpPattern returns cg.<ver>.*.*.svc.<service>.<op>: one operation
// of service in every project and channel (e.g. a worker's describe
// endpoint of one tool).
func ServiceOpPattern(ver, service, op string) (string, error) {
	p, err := ServicePattern(ver, service)
	if err != nil {
		return "", err
	}
	if e := checkToken("op", op); e != nil {
		return "", e
	}
	return p[:len(p)-1] + op, nil
}

func checkTokenOrWildcard(role, tok string) error {
	if tok == wildcard {
		return nil
	}
	if e := checkToken(role, tok); e != nil {
		return e
	}
	return nil
}
