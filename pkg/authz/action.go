package authz

import (
	"fmt"
	"strings"

	"github.com/cedar-policy/cedar-go/types"

	"github.com/utpmesh/utpmesh/pkg/registry"
)

// DefaultActionType is the Cedar entity type of the action of a tool whose
// registry entry names no cedar_action: Action::"<tool_name>".
const DefaultActionType = "Action"

// Entity types of the mesh's authorization model (see Schema).
const (
	TypeAgent    = "Agent"
	TypeOperator = "Operator"
	TypeProject  = "Project"
	TypeTool     = "Tool"
)

// ActionOf returns the Cedar action of a registry entry: its
// options.cedar_action verbatim (Namespace::"id", e.g.
// ATPAction::"get_context_package" whose entity type is ATPAction), or
// Action::"<tool_name>" when it names none. Policies name actions in the
// same form.
func ActionOf(e *registry.Entry) (types.EntityUID, error) {
	if e == nil {
		return types.EntityUID{}, fmt.Errorf("%w: no registry entry", ErrInvalidRequest)
	}
	if e.Options.CedarAction == "" {
		return types.NewEntityUID(DefaultActionType, types.String(e.ToolName)), nil
	}
	return ParseAction(e.Options.CedarAction)
}

// ParseAction parses Namespace::"id" (the registry's cedar_action form).
func ParseAction(s string) (types.EntityUID, error) {
	i := strings.LastIndex(s, `::"`)
	if i <= 0 || !strings.HasSuffix(s, `"`) || len(s) < i+5 {
		return types.EntityUID{}, fmt.Errorf("%w: action %q is not shaped Namespace::\"id\" (e.g. ATPAction::\"get_context_package\")", ErrInvalidRequest, s)
	}
	id := s[i+3 : len(s)-1]
	if strings.ContainsAny(id, "\"\\") {
		return types.EntityUID{}, fmt.Errorf("%w: action %q: the id may not contain quotes or backslashes", ErrInvalidRequest, s)
	}
	return types.NewEntityUID(types.EntityType(s[:i]), types.String(id)), nil
}

// AgentUID is the principal of an agent.
func AgentUID(agentID string) types.EntityUID {
	return types.NewEntityUID(TypeAgent, types.String(agentID))
}

// OperatorUID is the principal of an operator (an operator's call through
// svc.dispatch.operator.<name>).
func OperatorUID(name string) types.EntityUID {
	return types.NewEntityUID(TypeOperator, types.String(name))
}

// ProjectUID is the resource of a call no catalogue resolves to one of
// its entities, and the parent of every catalogue resource.
func ProjectUID(project string) types.EntityUID {
	return types.NewEntityUID(TypeProject, types.String(project))
}
