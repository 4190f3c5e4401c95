package subjects

// State events: a tool service announces each state transition of one of
// its resources (an ATP booking) on
//
//	cg.<ver>.<project_id>.<StateChannel>.evt.tool.<service>.state.<resource_id>
//
// A resource belongs to its project, not to a channel, so the channel token
// is the fixed StateChannel; service is ToolToken of the service name. The
// event stream (evt.>) keeps them like every event. An agent of the project
// subscribes to StateEventPattern(ver, project, "*", resource) to re-run
// its Windley query when a resource it is bound to changes state
// (docs/protocol.md, "State events").
const (
	// StateChannel is the channel token of state events.
	StateChannel = "state"
	// StateEventTarget is the token after the service's.
	StateEventTarget = "state"
)

// StateEvent builds the subject of a state transition of resource of
// service in project.
func StateEvent(ver, project, service, resource string) (Subject, error) {
	return build(Subject{
		Version: ver, Project: project, Channel: StateChannel,
		Category: Evt, Component: Tool, Target: ToolToken(service),
		Suffix: []string{StateEventTarget, resource},
	})
}

// StateEventPattern returns
// cg.<ver>.<project>.state.evt.tool.<service>.state.<resource>. Each of
// project, service and resource is a valid token or "*" (service is used
// as given when "*", else as ToolToken); ver must be a valid token.
func StateEventPattern(ver, project, service, resource string) (string, error) {
	if e := checkToken("ver", ver); e != nil {
		return "", e
	}
	if e := checkTokenOrWildcard("project_id", project); e != nil {
		return "", e
	}
	if service != "*" {
		service = ToolToken(service)
	}
	if e := checkTokenOrWildcard("resource_id", resource); e != nil {
		return "", e
	}
	return prefix + "." + ver + "." + project + "." + StateChannel + ".evt.tool." + service + "." + StateEventTarget + "." + resource, nil
}
