package tools

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/cedar-policy/cedar-go/types"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atp/hem"
)

// Error codes of a mandate expansion's approval.
const (
	// ReasonTooWide: the expansion would grant more than the parent
	// mandate (the narrowing property); the task stays PENDING.
	ReasonTooWide = "mandate_too_wide"
)

// requesterOf is the invoking call's mandate as a HEM-MANDATE-01 task
// keeps it (claims and policies, no signature); nil without one.
func requesterOf(c *worker.Call) *hem.Requester {
	tok := c.Mandate
	if tok == "" {
		tok = callMandate(c)
	}
	if tok == "" {
		return nil
	}
	m, err := mandate.Decode(tok)
	if err != nil {
		return nil
	}
	cl := m.Claims
	return &hem.Requester{JTI: cl.JTI, Issuer: cl.Issuer, Subject: cl.Subject, ExpiresAt: cl.ExpiresAt, Resource: cl.Resource,
		ParentChain: cl.ParentChain, AgentPub: cl.AgentPub, PolicySet: cl.Mandate.PolicySet}
}

var entityRef = regexp.MustCompile(`^(.+)::"([^"\\]+)"$`)

// parseAction reads ATPAction::"name" as an entity.
func parseAction(s string) (types.EntityUID, bool) {
	m := entityRef.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return types.EntityUID{}, false
	}
	return types.NewEntityUID(types.EntityType(m[1]), types.String(m[2])), true
}

// grantExpansion issues the sub-mandate an approval of HEM-MANDATE-01
// task t grants (seed §3.4A.4 steps 4–5, MCP-D15): the requesting
// agent's policies plus one permit of the requested action, narrowed from
// parentTok — the mandate the agent's was narrowed from, or the agent's
// own — and signed with the project's issuer key. It refuses, and
// explains, a parent that is not the agent's, and a request the parent
// does not cover (the narrowing property: never wider than the parent).
func (s *Service) grantExpansion(ctx context.Context, project string, t *hem.Task, parentTok string) (*hem.Grant, error) {
	x, req := t.Expansion, t.Requester
	if req == nil {
		return nil, worker.Fail(card.CodeBadRequest, fmt.Sprintf("task %s was invoked without a mandate: there is no agent mandate to expand; decline it (utpmesh hem decline %s --reason …)", t.TaskID, t.TaskID))
	}
	if strings.TrimSpace(parentTok) == "" {
		return nil, worker.Fail(card.CodeBadRequest, fmt.Sprintf("task %s asks for %s: approving it issues a sub-mandate narrowed from the agent's parent mandate; pass parent_mandate (utpmesh hem confirm %s --token T --parent-mandate FILE, e.g. utpmesh-data/demo-mandate.jwt)",
			t.TaskID, x.Action, t.TaskID))
	}
	action, ok := parseAction(x.Action)
	if !ok {
		return nil, worker.Fail(card.CodeBadRequest, fmt.Sprintf("task %s: requested action %q is not a Cedar action such as ATPAction::\"update_pre_arrangement\"", t.TaskID, x.Action))
	}
	key, err := mandate.NewKeyDir(s.deps.KeyDir).Load(ctx, project)
	if err != nil {
		return nil, worker.Fail(card.CodeUpstreamUnavailable, fmt.Sprintf("this atp worker cannot sign the sub-mandate: no issuer key of project %s under %s (%v); run the confirmation where the mesh's keys are (utpmesh up, or a worker with --data on the mesh's data directory)",
			project, s.deps.KeyDir, err))
	}
	v := &mandate.Verifier{Keys: mandate.StaticKeys{key}}
	parent, err := v.Verify(ctx, parentTok, key.Issuer)
	if err != nil {
		return nil, worker.Fail(card.CodeBadRequest, fmt.Sprintf("parent_mandate does not verify with project %s's issuer key: %v", project, err))
	}
	pj := parent.Claims.JTI
	if pj != req.JTI && (len(req.ParentChain) == 0 || req.ParentChain[len(req.ParentChain)-1] != pj) {
		return nil, worker.Fail(card.CodeBadRequest, fmt.Sprintf("parent_mandate %s is not the parent of the agent's mandate %s (its parent_chain is %v): pass the mandate the agent's was narrowed from",
			pj, req.JTI, req.ParentChain))
	}
	wide := func(err error) error {
		return worker.FailDetail(card.CodeBadRequest, fmt.Sprintf("the expansion of task %s is wider than the parent mandate %s, so it is refused (narrowing property, MCP-D15): %v; the task stays PENDING: decline it with the reason (utpmesh hem decline %s --reason …)",
			t.TaskID, pj, err, t.TaskID), map[string]any{"error": ReasonTooWide, "requested_action": x.Action, "parent_mandate_jti": pj})
	}
	added, err := mandate.PermitFrom(parent.Policies, action, "hem-expansion-"+strings.TrimPrefix(t.TaskID, "hem_"))
	if err != nil {
		return nil, wide(err)
	}
	exp := req.ExpiresAt
	if exp > parent.Claims.ExpiresAt || exp == 0 {
		exp = parent.Claims.ExpiresAt
	}
	child := mandate.Claims{Subject: req.Subject, ExpiresAt: exp, Resource: req.Resource, AgentPub: req.AgentPub,
		Mandate: mandate.Grant{PolicySet: strings.TrimRight(req.PolicySet, "\n") + "\n" + added + "\n"}}
	tok, err := mandate.Narrow(key, parent, child, s.store.Now())
	if errors.Is(err, mandate.ErrTooWide) {
		return nil, wide(err)
	}
	if err != nil {
		return nil, worker.Fail(card.CodeBadRequest, fmt.Sprintf("task %s: the sub-mandate cannot be issued: %v", t.TaskID, err))
	}
	issued, err := mandate.Decode(tok)
	if err != nil {
		return nil, err
	}
	return &hem.Grant{Token: tok, JTI: issued.Claims.JTI, ParentJTI: pj, Policy: added, ExpiresAt: exp}, nil
}
