package authz

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cedar-policy/cedar-go"
)

// unevaluatedForbids returns the forbid policies of ps whose evaluation
// produced an error in diag, sorted by id. Cedar skips a policy whose
// evaluation errs; for a forbid that would allow a call the policy's
// author meant to refuse, so the gate denies instead (fail closed). An
// erring permit needs no such care: skipping it only permits less.
func unevaluatedForbids(ps *cedar.PolicySet, diag cedar.Diagnostic) []cedar.DiagnosticError {
	var out []cedar.DiagnosticError
	for _, e := range diag.Errors {
		if p := ps.Get(e.PolicyID); p != nil && p.Effect() == cedar.Forbid {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PolicyID < out[j].PolicyID })
	return out
}

// forbidDenial explains the denial of a call by unevaluated forbid
// policies of owner ("project demo", "mandate <jti>"): each policy's id,
// line and what was missing. What was missing is, when the policy names
// context attributes this process's schema lacks (a catalogue it does not
// serve declares them: an external worker built with the SDK registers no
// catalogue), those attributes; else Cedar's own message.
func forbidDenial(owner string, ps *cedar.PolicySet, errs []cedar.DiagnosticError) string {
	frags := fragments()
	parts := make([]string, 0, len(errs))
	for _, e := range errs {
		what := e.Message
		if p := ps.Get(e.PolicyID); p != nil {
			if missing := checkNames(p, frags, nil); len(missing) > 0 {
				what = strings.Join(missing, "; ")
			}
		}
		parts = append(parts, fmt.Sprintf("forbid policy %s (line %d): %s", e.PolicyID, e.Position.Line, what))
	}
	return fmt.Sprintf("%s: %s; a forbid policy that cannot be evaluated denies the call (fail closed): "+
		"serve the catalogue that declares its attributes in this process, or guard them with `context has`",
		owner, strings.Join(parts, "; "))
}

// prefixed returns "<prefix>:<id>" of each error's policy.
func prefixed(prefix string, errs []cedar.DiagnosticError) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = prefix + ":" + string(e.PolicyID)
	}
	return out
}
