package gateway

import "strings"

// Setting keys of the system scope that guard agents' own permissions
// (issue 23, "Roles"): only an operator writes them. The system settings
// tools that write are operator-only (Spec.Operator), and an agent's
// db.preference.* write of such a key at scope_type system (the same
// store) is refused (GuardsPermissions).
const (
	// AgentSettingsPrefix are the agents' permission switches, e.g.
	// agents.project_manager.sandbox.allow_add_to_allowed_images.
	AgentSettingsPrefix = "agents."
	// AllowedImagePrefix are the sandbox images added to the allowed
	// images (sandbox.allowed_images.add writes them when the operator's
	// switch allows it).
	AllowedImagePrefix = "sandbox.allowed_images/"
)

// GuardsPermissions reports whether a system-scope key guards agents'
// permissions (AgentSettingsPrefix, AllowedImagePrefix).
func GuardsPermissions(key string) bool {
	return strings.HasPrefix(key, AgentSettingsPrefix) || strings.HasPrefix(key, AllowedImagePrefix)
}
