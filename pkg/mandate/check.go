package mandate

import (
	"slices"
	"sync"

	"github.com/cedar-policy/cedar-go"
)

// PolicyCheck is a rule a catalogue adds on the policy sets of mandates
// (e.g. ATP's: a mandate permitting its escalation action must list the
// escalations it permits). Issue and Narrow refuse a policy set a registered check
// refuses, and the gate refuses such a token however it was signed
// (CheckPolicies).
type PolicyCheck interface {
	// CheckPolicies returns nil when ps is acceptable, else an error that
	// says which policy breaks the rule and how to fix it.
	CheckPolicies(ps *cedar.PolicySet) error
}

var (
	checkMu sync.RWMutex
	checks  []namedCheck
)

type namedCheck struct {
	name  string
	check PolicyCheck
}

// RegisterPolicyCheck adds the check of a name (a catalogue's name);
// registering a name again replaces its check.
func RegisterPolicyCheck(name string, c PolicyCheck) {
	checkMu.Lock()
	defer checkMu.Unlock()
	checks = slices.DeleteFunc(checks, func(x namedCheck) bool { return x.name == name })
	checks = append(checks, namedCheck{name, c})
}

// UnregisterPolicyCheck removes the check of a name (tests).
func UnregisterPolicyCheck(name string) {
	checkMu.Lock()
	defer checkMu.Unlock()
	checks = slices.DeleteFunc(checks, func(x namedCheck) bool { return x.name == name })
}

// CheckPolicies runs the registered checks on ps in registration order.
// The first refusal is returned with its own message; it wraps both
// ErrPolicyRefused and the check's error.
func CheckPolicies(ps *cedar.PolicySet) error {
	checkMu.RLock()
	cs := slices.Clone(checks)
	checkMu.RUnlock()
	for _, c := range cs {
		if err := c.check.CheckPolicies(ps); err != nil {
			return &refusal{err: err}
		}
	}
	return nil
}

// refusal is a registered check's error: its message, and errors.Is
// matches ErrPolicyRefused as well as the check's own error.
type refusal struct{ err error }

func (r *refusal) Error() string   { return r.err.Error() }
func (r *refusal) Unwrap() []error { return []error{ErrPolicyRefused, r.err} }
