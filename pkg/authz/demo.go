package authz

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cedar-policy/cedar-go/types"

	"github.com/utpmesh/utpmesh/internal/atomicfile"
	"github.com/utpmesh/utpmesh/pkg/mandate"
)

// Demo setup constants (utpmesh up).
const (
	// DemoProject is the project SetupDemo installs a policy set in.
	DemoProject = "demo"
	// DemoAgent is the subject of the demo mandate.
	DemoAgent = "demo-agent"
	// DemoMandateFile is the demo mandate's file name under the data dir.
	DemoMandateFile = "demo-mandate.jwt"
	// DemoMandateTTL is how long a demo mandate is valid; SetupDemo
	// reissues it when less than a day is left.
	DemoMandateTTL = 30 * 24 * time.Hour
)

// DemoGranter is implemented by a catalogue that grants some of its
// actions in the demo policy in its own way (e.g. only for values of a
// context attribute it lists). DemoPolicy asks the registered catalogues.
type DemoGranter interface {
	// DemoGrant returns the Cedar text (one or more policies, each line
	// ending in a newline) that grants action to principal (a Cedar
	// principal scope, e.g. `principal` or `principal == Agent::"a"`) on
	// DemoProject, and true; or false to have it granted plainly.
	DemoGrant(principal string, action types.EntityUID) (policy string, ok bool)
}

// DemoResult says what SetupDemo did.
type DemoResult struct {
	// KeysCreated are the projects whose issuer key was created.
	KeysCreated []string
	// PolicyInstalled reports whether the demo project's policy set was
	// installed (it is never overwritten).
	PolicyInstalled bool
	// MandatePath is the demo mandate file ("" when DemoProject is not
	// among the projects).
	MandatePath string
	// MandateIssued reports whether the file was (re)written.
	MandateIssued bool
}

// DemoPolicy is the Cedar text of the demo policy set for the given
// actions: any agent may call them on the demo project, except that an
// action a registered catalogue grants in its own way (DemoGranter) is
// granted by the catalogue's policy, after the plain ones.
func DemoPolicy(principal string, actions []types.EntityUID) string {
	if principal == "" {
		principal = "principal"
	} else {
		principal = "principal == " + AgentUID(principal).String()
	}
	var plain, own []string
	for _, a := range actions {
		if p, ok := demoGrant(principal, a); ok {
			own = append(own, p)
			continue
		}
		plain = append(plain, a.String())
	}
	sort.Strings(plain)
	var b strings.Builder
	b.WriteString("// Demo policy written by `utpmesh up` (docs/security.md): the tools the mesh serves, on project demo.\n")
	if len(plain) > 0 {
		fmt.Fprintf(&b, "@id(\"demo-tools\")\npermit(%s, action in [%s], resource in Project::%q);\n", principal, strings.Join(plain, ", "), DemoProject)
	}
	for _, p := range own {
		b.WriteString(p)
	}
	if len(plain) == 0 && len(own) == 0 {
		b.WriteString("// (no tools served: nothing is permitted)\n")
	}
	return b.String()
}

// DemoOperatorPolicy is the Cedar text that lets the mesh's operators
// (principal type Operator, any name) call actions on the demo project:
// the actions of operator-only tools (registry options.principal
// operator), which no agent and no demo mandate is granted. "" for none.
func DemoOperatorPolicy(actions []types.EntityUID) string {
	if len(actions) == 0 {
		return ""
	}
	names := make([]string, len(actions))
	for i, a := range actions {
		names[i] = a.String()
	}
	sort.Strings(names)
	return fmt.Sprintf("@id(\"demo-operators\")\npermit(principal is %s, action in [%s], resource in Project::%q);\n", TypeOperator, strings.Join(names, ", "), DemoProject)
}

// demoGrant asks the registered catalogues for their grant of action.
func demoGrant(principal string, action types.EntityUID) (string, bool) {
	for _, c := range Catalogues() {
		if g, ok := c.(DemoGranter); ok {
			if p, ok := g.DemoGrant(principal, action); ok {
				return p, true
			}
		}
	}
	return "", false
}

// SetupDemo prepares authorization for `utpmesh up`: an issuer key for
// each project, and for DemoProject (when listed) the demo policy set
// (only if the project has none) and a demo mandate for DemoAgent in
// <dataDir>/demo-mandate.jwt (mode 0600; reissued when missing, invalid
// or within a day of expiry). actions are the agents' tools' actions: the
// policy set grants them to any principal and the mandate to DemoAgent.
// operatorActions are the operator-only tools' actions: the policy set
// grants them to operators (DemoOperatorPolicy) and the mandate never
// holds them.
func SetupDemo(ctx context.Context, store PolicyStore, keys *mandate.KeyDir, projects []string, actions []types.EntityUID, dataDir string, now time.Time, operatorActions ...types.EntityUID) (*DemoResult, error) {
	res := &DemoResult{}
	demo := false
	for _, p := range projects {
		_, created, err := keys.Ensure(ctx, p)
		if err != nil {
			return nil, err
		}
		if created {
			res.KeysCreated = append(res.KeysCreated, p)
		}
		demo = demo || p == DemoProject
	}
	if !demo {
		return res, nil
	}
	if _, err := store.Policies(ctx, DemoProject); errors.Is(err, ErrNotFound) {
		if _, err := store.PutPolicies(ctx, DemoProject, DemoPolicy("", actions)+DemoOperatorPolicy(operatorActions)); err != nil {
			return nil, fmt.Errorf("authz: demo policy: %w", err)
		}
		res.PolicyInstalled = true
	} else if err != nil {
		return nil, err
	}
	key, err := keys.Load(ctx, DemoProject)
	if err != nil {
		return nil, err
	}
	res.MandatePath = filepath.Join(dataDir, DemoMandateFile)
	if old, err := os.ReadFile(res.MandatePath); err == nil {
		v := &mandate.Verifier{Keys: keys, Now: func() time.Time { return now.Add(24 * time.Hour) }}
		if _, err := v.Verify(ctx, string(old), mandate.IssuerName(DemoProject)); err == nil {
			return res, nil
		}
	}
	tok, err := mandate.Issue(key, mandate.Claims{
		Subject: DemoAgent, ExpiresAt: now.Add(DemoMandateTTL).Unix(),
		Mandate: mandate.Grant{PolicySet: DemoPolicy(DemoAgent, actions)},
	}, now)
	if err != nil {
		return nil, fmt.Errorf("authz: demo mandate: %w", err)
	}
	// Atomically: a reader (a test, a script waiting for the file) never
	// sees it empty or cut, which would be a call without a mandate.
	if err := atomicfile.Write(res.MandatePath, []byte(tok+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("authz: write demo mandate: %w", err)
	}
	res.MandateIssued = true
	return res, nil
}
