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

// ProjectConfig is a project's authorization configuration.
type ProjectConfig struct {
	// Mandate is "required" (the default when empty or unset) or
	// "not_required" (an explicit opt-out).
	Mandate MandateMode `json:"mandate"`
}

// Check validates c; the error names the field and the values accepted.
func (c ProjectConfig) Check() error {
	switch c.Mandate {
	case "", MandateRequired, MandateNotRequired:
		return nil
	}
	return fmt.Errorf("%w: mandate is %q; use %q or %q", ErrInvalidRequest, c.Mandate, MandateRequired, MandateNotRequired)
}

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

// BookingStates tells the gate a booking's current state (for the context
// attribute booking_state). The ATP catalogue provides one; without it the
// gate sets booking_state to "".
type BookingStates interface {
	BookingState(ctx context.Context, project, bookingID string) (string, error)
}

// Decision values of an AuditRecord.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
)

// Deny reasons (AuditRecord.Reason and the auth_failed detail's reason).
const (
	ReasonMandateMissing     = "mandate_missing"
	ReasonMandateInvalid     = "mandate_invalid"
	ReasonSubjectMismatch    = "mandate_subject_mismatch"
	ReasonBookingMismatch    = "booking_mismatch"
	ReasonNoProjectPolicy    = "no_project_policy"
	ReasonProjectPolicy      = "project_policy_denied"
	ReasonScopeViolation     = "mandate_scope_violation"
	ReasonAllowed            = "allowed"
	ReasonBuiltinAuthorized  = "builtin"
	ReasonMandateNotRequired = "mandate_not_required"
)

// AuditRecord is one gate decision, published on
// cg.<ver>.<project>.<channel>.evt.sys.authz.decision. It never holds the
// call's arguments or the token.
type AuditRecord struct {
	Time       time.Time `json:"time"`
	ProjectID  string    `json:"project_id"`
	ChannelID  string    `json:"channel_id"`
	AgentID    string    `json:"agent_id"`
	ToolName   string    `json:"tool_name"`
	ToolCallID string    `json:"tool_call_id"`
	Action     string    `json:"action"`
	Decision   string    `json:"decision"`
	Reason     string    `json:"reason"`
	// Policies are the ids of the policies that determined the decision,
	// prefixed "project:" or "mandate:".
	Policies        []string `json:"policies"`
	MandateJTI      string   `json:"mandate_jti,omitempty"`
	MandateIssuer   string   `json:"mandate_issuer,omitempty"`
	BookingObjectID string   `json:"booking_object_id,omitempty"`
}

// Auditor receives every decision of the gate.
type Auditor interface {
	Audit(ctx context.Context, version string, rec *AuditRecord)
}
