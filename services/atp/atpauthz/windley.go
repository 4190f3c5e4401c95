package atpauthz

import (
	"fmt"
	"strings"

	"github.com/utpmesh/utpmesh/pkg/authz"
)

// WindleyTemplateVersion versions the Windley context template with the
// Prompt Library convention of the seed (OQ-SDK-4):
// atp/{protocol-version}+tooling/{tooling-version}.
const WindleyTemplateVersion = "atp/1.0+tooling/1.0.0"

// RenderContext renders the Windley context block of r, the system-prompt
// block that names the permitted tools, the booking the session is bound
// to, the permitted hem_id values and the current booking state.
func RenderContext(r *authz.Residual) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Authorization context (%s)\n", WindleyTemplateVersion)
	fmt.Fprintf(&b, "Agent: %s | Project: %s", r.AgentID, r.ProjectID)
	if r.MandateJTI != "" {
		fmt.Fprintf(&b, " | Mandate: %s", r.MandateJTI)
		if r.ExpiresAt != nil {
			fmt.Fprintf(&b, " (expires %s)", r.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z"))
		}
	}
	b.WriteString("\n")
	if r.ResourceID != nil {
		fmt.Fprintf(&b, "Bound booking_object_id: %s\n", *r.ResourceID)
	} else {
		b.WriteString("Bound booking_object_id: none\n")
	}
	if r.State != nil {
		fmt.Fprintf(&b, "Booking state: %s\n", *r.State)
	} else {
		b.WriteString("Booking state: unknown (state-dependent conditions are listed)\n")
	}
	b.WriteString("Permitted tools:\n")
	if len(r.Permitted) == 0 {
		b.WriteString("- none\n")
	}
	for _, p := range r.Permitted {
		fmt.Fprintf(&b, "- %s (%s)", p.ToolName, p.Action)
		switch {
		case len(p.Enumerated) > 0:
			fmt.Fprintf(&b, " only with hem_id in: %s", strings.Join(p.Enumerated, ", "))
		case p.Conditional:
			fmt.Fprintf(&b, " only when: %s", strings.Join(p.Conditions, " ; "))
		}
		b.WriteString("\n")
	}
	if len(r.Enumerated) > 0 {
		fmt.Fprintf(&b, "Permitted hem_id values: %s\n", strings.Join(r.Enumerated, ", "))
	}
	b.WriteString("Plan only calls to the permitted tools. If the plan needs any other action, do not call it: " +
		"request a mandate expansion (atp_invoke_hem, hem_id HEM-MANDATE-01, trigger_reason MANDATE_GAP_DETECTED).\n")
	return b.String()
}

// TemplateVersion implements authz.ContextRenderer.
func (c *Catalogue) TemplateVersion() string { return WindleyTemplateVersion }

// RenderContext implements authz.ContextRenderer.
func (c *Catalogue) RenderContext(r *authz.Residual) string { return RenderContext(r) }
