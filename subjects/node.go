package subjects

// Node-scoped service subjects
//
//	cg.<ver>.<project_id>.<channel_id>.svc.<service>.node.<node>
//
// reach one process (node) of a service that keeps something only that
// process holds: CyNodeAI's sandboxes live in one worker's directories,
// and a call another worker took is forwarded to the holder here. <node>
// is the node's name, a token of its own (no mapping: a name that is not
// a token is refused, naming the character). Like tool-scoped subjects
// they have one token more than a plain svc subject, so a service
// listening on svc.<service>.* never receives them.

// NodeOp is the op token of node-scoped service subjects.
const NodeOp = "node"

// NodeService builds cg.<ver>.<project>.<channel>.svc.<service>.node.<node>.
// An invalid node name is reported with role "node".
func NodeService(ver, project, channel, service, node string) (string, error) {
	s, err := Service(ver, project, channel, service, NodeOp)
	if err != nil {
		return "", err
	}
	if e := checkToken("node", node); e != nil {
		return "", buildErr(e)
	}
	return s.String() + "." + node, nil
}

// NodeServicePattern returns cg.<ver>.*.*.svc.<service>.node.<node>, one
// node's subject in every project and channel; node may be "*" (every
// node of the service: the NATS permission of the service's workers).
func NodeServicePattern(ver, service, node string) (string, error) {
	p, err := ServiceOpPattern(ver, service, NodeOp)
	if err != nil {
		return "", err
	}
	if e := checkTokenOrWildcard("node", node); e != nil {
		return "", e
	}
	return p + "." + node, nil
}
