package authz

import (
	"fmt"
	"strings"
)

// PlainTemplateVersion versions the plain Windley context block, rendered
// when no registered catalogue is a ContextRenderer.
const PlainTemplateVersion = "utpmesh/1.0"

// renderContext renders r's context block with the first registered
// ContextRenderer, else as a plain list; it returns the block's template
// version and text.
func renderContext(r *Residual) (version, block string) {
	for _, c := range Catalogues() {
		if cr, ok := c.(ContextRenderer); ok {
			r.TemplateVersion = cr.TemplateVersion()
			return r.TemplateVersion, cr.RenderContext(r)
		}
	}
	r.TemplateVersion = PlainTemplateVersion
	var b strings.Builder
	fmt.Fprintf(&b, "## Authorization context (%s)\n", PlainTemplateVersion)
	fmt.Fprintf(&b, "Agent: %s | Project: %s", r.AgentID, r.ProjectID)
	if r.MandateJTI != "" {
		fmt.Fprintf(&b, " | Mandate: %s", r.MandateJTI)
	}
	b.WriteString("\nPermitted tools:\n")
	if len(r.Permitted) == 0 {
		b.WriteString("- none\n")
	}
	for _, p := range r.Permitted {
		fmt.Fprintf(&b, "- %s (%s)", p.ToolName, p.Action)
		if p.Conditional {
			fmt.Fprintf(&b, " only when: %s", strings.Join(p.Conditions, " ; "))
		}
		b.WriteString("\n")
	}
	b.WriteString("Plan only calls to the permitted tools.\n")
	return PlainTemplateVersion, b.String()
}
