package subjects

// Dispatch subjects: the mesh's admission service (docs/protocol.md,
// "Admission"). An agent runtime asks the mesh to admit and dispatch a call
// with one request on
//
//	cg.<ver>.<project_id>.<channel_id>.svc.dispatch.call.<agent>
//
// and an operator on
//
//	cg.<ver>.<project_id>.<channel_id>.svc.dispatch.operator.<name>
//
// where the last token is ToolToken of the agent id or operator name, so a
// NATS publish permission on the subject proves who asks (a per-agent
// identity may publish only on its own). The mesh's admission public keys
// are read with a request on cg.<ver>.<project_id>.<channel_id>.svc.dispatch.keys.
const (
	// DispatchService is the admission service's svc token.
	DispatchService = "dispatch"
	// DispatchCallOp is the op of an agent's call.
	DispatchCallOp = "call"
	// DispatchOperatorOp is the op of an operator's call.
	DispatchOperatorOp = "operator"
	// DispatchKeysOp is the op that answers the admission public keys.
	DispatchKeysOp = "keys"
)

// Dispatch builds cg.<ver>.<project>.<channel>.svc.dispatch.call.<agent>,
// where an agent asks the mesh to admit and dispatch a call.
func Dispatch(ver, project, channel, agentID string) (ToolSubject, error) {
	return ToolService(ver, project, channel, DispatchService, DispatchCallOp, agentID)
}

// OperatorDispatch builds cg.<ver>.<project>.<channel>.svc.dispatch.operator.<name>,
// where an operator asks the mesh to admit and dispatch a call.
func OperatorDispatch(ver, project, channel, operator string) (ToolSubject, error) {
	return ToolService(ver, project, channel, DispatchService, DispatchOperatorOp, operator)
}

// DispatchKeys builds cg.<ver>.<project>.<channel>.svc.dispatch.keys.
func DispatchKeys(ver, project, channel string) (Subject, error) {
	return Service(ver, project, channel, DispatchService, DispatchKeysOp)
}
