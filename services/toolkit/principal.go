package toolkit

import (
	"strings"

	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// Caller is who made a call.
type Caller struct {
	// Operator is the operator's name when the mesh admitted the call as
	// an operator's (principal operator:<name>, the same in the call and
	// its admission); "" otherwise.
	Operator string
	// AgentID is the calling agent (the command's agent_id).
	AgentID string
}

// CallerOf returns who made call c. A call is an operator's only when the
// mesh's admission says so: a principal the call claims without a
// matching admission is read as the agent's.
func CallerOf(c *worker.Call) Caller {
	who := Caller{AgentID: c.Command.AgentID}
	kind, name, _ := strings.Cut(c.Principal, ":")
	if kind == utp.PrincipalOperator && name != "" && c.Admission != nil && c.Admission.Principal == c.Principal {
		who.Operator = name
	}
	return who
}

// IsOperator reports whether an operator made the call.
func (c Caller) IsOperator() bool { return c.Operator != "" }

// Principal names the caller: "operator:<name>" or "agent:<agent_id>".
func (c Caller) Principal() string {
	if c.Operator != "" {
		return utp.PrincipalOperator + ":" + c.Operator
	}
	return utp.PrincipalAgent + ":" + c.AgentID
}

// Actor names who made call c for an event log or a record:
// "operator:<name>" of an admitted operator's call, else
// "agent:<agent_id>" (an agent is never logged as an operator).
func Actor(c *worker.Call) string { return CallerOf(c).Principal() }
