package authz

import (
	"context"
	"fmt"
	"time"
)

// MandateMode says whether a project's calls must carry a mandate.
type MandateMode string

// The mandate modes. The zero value means MandateRequired.
const (
	// MandateRequired: every call must carry a valid mandate whose policies
	// permit it (and the project's policies must permit it too). Default.
	MandateRequired MandateMode = "required"
	// MandateNotRequired: the project's operator has opted out explicitly;
	// the project's policies alone decide, with principal Agent::"<agent_id>"
	// of the command. A mandate that is present is still verified and
	// enforced.
	MandateNotRequired MandateMode = "not_required"
)

// CommandsMode says how a project's tool commands reach its workers.
type CommandsMode string

// The commands modes. The zero value means CommandsAdmitted.
const (
	// CommandsAdmitted: calls are dispatched through the mesh's admission
	// service (svc.dispatch), which authorizes them and signs the command
	// (CG-Admission); workers run only admitted commands. Default.
	CommandsAdmitted CommandsMode = "admitted"
	// CommandsRaw: the project's operator has opted in explicitly to
	// agents publishing raw UTP commands themselves (CommonGround-style
	// runtimes); the tool.call cards then carry the mandate and every SDK
	// worker runs the full gate on a command without an admission. A
	// foreign worker with no gate code runs whatever it is sent.
	CommandsRaw CommandsMode = "raw"
)

// ProjectConfig is a project's authorization configuration.
type ProjectConfig struct {
	// Mandate is "required" (the default when empty or unset) or
	// "not_required" (an explicit opt-out).
	Mandate MandateMode `json:"mandate"`
	// Retention is the project's retention policy for turns
	// (pkg/retention); nil keeps every turn.
	Retention *ProjectRetention `json:"retention,omitempty"`
	// Commands is "admitted" (the default when empty or unset) or "raw"
	// (an explicit, logged opt-in to raw commands).
	Commands CommandsMode `json:"commands,omitempty"`
}

// Check validates c; the error names the field and the values accepted.
func (c ProjectConfig) Check() error {
	if err := c.Retention.check(); err != nil {
		return err
	}
	switch c.Mandate {
	case "", MandateRequired, MandateNotRequired:
	default:
		return fmt.Errorf("%w: mandate is %q; use %q or %q", ErrInvalidRequest, c.Mandate, MandateRequired, MandateNotRequired)
	}
	switch c.Commands {
	case "", CommandsAdmitted, CommandsRaw:
		return nil
	}
	return fmt.Errorf("%w: commands is %q; use %q or %q", ErrInvalidRequest, c.Commands, CommandsAdmitted, CommandsRaw)
}

// RawCommands reports whether the project accepts raw commands (Commands
// is CommandsRaw).
func (c ProjectConfig) RawCommands() bool { return c.Commands == CommandsRaw }

// Required reports whether calls need a mandate.
func (c ProjectConfig) Required() bool { return c.Mandate != MandateNotRequired }

// PolicyDoc is a project's stored policy set.
type PolicyDoc struct {
	Project string `json:"project"`
	// Policies is the Cedar policy text, as put.
	Policies string `json:"policies"`
	// Version counts puts, from 1.
	Version uint64 `json:"version"`
	// SHA256 is the hex SHA-256 of Policies.
	SHA256    string    `json:"sha256"`
	UpdatedAt time.Time `json:"updated_at"`
	// RolledBackFrom is the version whose text this version restored
	// (policy rollback); 0 for a put.
	RolledBackFrom uint64 `json:"rolled_back_from,omitempty"`
}

// PolicyVersion describes one kept version of a project's policy set
// (without its text; PolicyHistory.PolicyVersion returns the text).
type PolicyVersion struct {
	Version   uint64    `json:"version"`
	SHA256    string    `json:"sha256"`
	UpdatedAt time.Time `json:"updated_at"`
	// Bytes is the length of the policy text.
	Bytes          int    `json:"bytes"`
	RolledBackFrom uint64 `json:"rolled_back_from,omitempty"`
	// Current is true for the version the gate uses.
	Current bool `json:"current"`
}

// PolicySource is where the gate reads projects' policies and configs.
type PolicySource interface {
	// Policies returns the project's policy set, or an error wrapping
	// ErrNotFound.
	Policies(ctx context.Context, project string) (*PolicyDoc, error)
	// Config returns the project's config; a project never configured
	// gets the zero ProjectConfig (mandate required).
	Config(ctx context.Context, project string) (ProjectConfig, error)
}

// PolicyStore is a PolicySource that can be written.
type PolicyStore interface {
	PolicySource
	// PutPolicies validates and stores text as the project's policy set.
	PutPolicies(ctx context.Context, project, text string) (*PolicyDoc, error)
	// PutConfig stores the project's config.
	PutConfig(ctx context.Context, project string, c ProjectConfig) error
}

// PolicyHistory is a PolicyStore that keeps the last versions of each
// project's policy set and can restore one.
type PolicyHistory interface {
	PolicyStore
	// ReplacePolicies is PutPolicies that refuses (ErrConflict) unless the
	// stored version is base (0: no set stored yet), so a replacement
	// confirmed against one version never overwrites another.
	ReplacePolicies(ctx context.Context, project, text string, base uint64) (*PolicyDoc, error)
	// History lists the kept versions, newest first.
	History(ctx context.Context, project string) ([]PolicyVersion, error)
	// PolicyVersion returns one kept version, or an error wrapping
	// ErrNotFound.
	PolicyVersion(ctx context.Context, project string, version uint64) (*PolicyDoc, error)
	// Rollback validates the text of a kept version against the project's
	// current tools and stores it as a new version (RolledBackFrom set);
	// base is as for ReplacePolicies.
	Rollback(ctx context.Context, project string, version, base uint64) (*PolicyDoc, error)
}

// Decision values of an AuditRecord.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
)

// Deny reasons (AuditRecord.Reason and the auth_failed detail's reason).
const (
	ReasonMandateMissing  = "mandate_missing"
	ReasonMandateInvalid  = "mandate_invalid"
	ReasonSubjectMismatch = "mandate_subject_mismatch"
	// ReasonResourceMismatch: the call names a resource other than the
	// one its mandate is bound to (ErrBindingMismatch).
	ReasonResourceMismatch   = "booking_mismatch"
	ReasonNoProjectPolicy    = "no_project_policy"
	ReasonProjectPolicy      = "project_policy_denied"
	ReasonScopeViolation     = "mandate_scope_violation"
	ReasonAllowed            = "allowed"
	ReasonBuiltinAuthorized  = "builtin"
	ReasonMandateNotRequired = "mandate_not_required"
	// ReasonOperatorOnly: the tool's registry options.principal is
	// "operator"; agents may not call it (admission).
	ReasonOperatorOnly = "operator_only"
	// ReasonOperator: an operator's call, allowed by the project's
	// policies (no mandate).
	ReasonOperator = "operator"
)

// AuditRecord is one gate decision, published on
// cg.<ver>.<project>.<channel>.evt.sys.authz.decision. It never holds the
// call's arguments or the token.
type AuditRecord struct {
	Time      time.Time `json:"time"`
	ProjectID string    `json:"project_id"`
	ChannelID string    `json:"channel_id"`
	AgentID   string    `json:"agent_id"`
	// Operator names the operator of an operator's call (principal
	// Operator::"<name>"); "" for an agent's.
	Operator   string `json:"operator,omitempty"`
	ToolName   string `json:"tool_name"`
	ToolCallID string `json:"tool_call_id"`
	Action     string `json:"action"`
	Decision   string `json:"decision"`
	Reason     string `json:"reason"`
	// Policies are the ids of the policies that determined the decision,
	// prefixed "project:" or "mandate:".
	Policies      []string `json:"policies"`
	MandateJTI    string   `json:"mandate_jti,omitempty"`
	MandateIssuer string   `json:"mandate_issuer,omitempty"`
	// ResourceID is Decision.ResourceID (wire: booking_object_id).
	ResourceID string `json:"booking_object_id,omitempty"`
}

// Auditor receives every decision of the gate.
type Auditor interface {
	Audit(ctx context.Context, version string, rec *AuditRecord)
}
