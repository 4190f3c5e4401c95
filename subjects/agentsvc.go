package subjects

// Agent-scoped service subjects
//
//	cg.<ver>.<project_id>.<channel_id>.svc.<service>.<op>.<agent>
//
// are a mesh service's operation done on behalf of one agent: the
// CardStore's reads and puts and the inbox's list, get, ack and set_epoch
// of an agent runtime carry the agent in their subject (ToolToken of the
// agent id), so a NATS publish permission on the subject proves the
// requester may act for that agent (a per-agent identity may publish only
// its own; internal/meshauth), and the service checks that what is read or
// written is that agent's. They have the shape of the tool-scoped subjects
// (one token more than a plain svc subject; ParseToolService reads both,
// with the agent token in ToolSubject.Tool): a service tells them apart by
// the op, and its agent-scoped ops and tool-scoped ops are disjoint sets
// (the CardStore's: put, get, get_many, list_turn, find_result,
// box_create, box_append, box_get, list_turns for agents; start_call,
// claim, release, put_result, claim_key, release_key, get_claim for tools
// and services).

// AgentService builds cg.<ver>.<project>.<channel>.svc.<service>.<op>.<agent>,
// where agentID is an agent id (made a token by ToolToken, as on the
// dispatch subject).
func AgentService(ver, project, channel, service, op, agentID string) (ToolSubject, error) {
	if agentID == "" {
		return ToolSubject{}, buildErr(&TokenError{Role: "agent_id", Token: agentID, Reason: "empty"})
	}
	return ToolService(ver, project, channel, service, op, agentID)
}

// AgentServiceAllow returns cg.<ver>.<project>.*.svc.<service>.<op>.<agent>:
// the publish permission that lets an identity do op for one agent of
// project in every channel. project may be "*" (every project) and agentID
// "*" (every agent of the project); any other agent id is made a token by
// ToolToken.
func AgentServiceAllow(ver, project, service, op, agentID string) (string, error) {
	if e := checkToken("ver", ver); e != nil {
		return "", buildErr(e)
	}
	if project != wildcard {
		if e := checkToken("project_id", project); e != nil {
			return "", buildErr(e)
		}
	}
	if e := checkToken("service", service); e != nil {
		return "", buildErr(e)
	}
	if e := checkToken("op", op); e != nil {
		return "", buildErr(e)
	}
	tok := agentID
	switch agentID {
	case "":
		return "", buildErr(&TokenError{Role: "agent_id", Token: agentID, Reason: "empty"})
	case wildcard:
	default:
		tok = ToolToken(agentID)
	}
	return prefix + "." + ver + "." + project + ".*.svc." + service + "." + op + "." + tok, nil
}
