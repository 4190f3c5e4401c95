package authz

import (
	"context"
	"errors"
	"fmt"

	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/registry"
)

// Querier answers Windley queries for the tools registered in a project:
// it verifies the caller's mandate, reads the project's policies and runs
// Query. The PMO built-in mandate_query and the authz service's query
// operation use it.
type Querier struct {
	Policies PolicySource
	Keys     mandate.KeyResolver
	Registry registry.Registry
	// Verifier overrides the default verifier (clock); optional.
	Verifier *mandate.Verifier
	// Resources resolve the mandate's bound resource (QueryRequest);
	// optional.
	Resources []ResourceResolver
}

// QueryInput is what a caller asks.
type QueryInput struct {
	Project string
	// AgentID is the caller; the mandate's sub must equal it.
	AgentID string
	// Mandate is the compact token; "" only when the project requires none.
	Mandate string
	// State is the current state of the bound resource (protocol §10.3
	// booking_state); nil when unknown.
	State *string
}

// Query runs the query. A mandate that does not verify wraps its mandate
// sentinel (mandate.ErrExpired…); a project without policies ErrNotFound.
func (q *Querier) Query(ctx context.Context, in QueryInput) (*Residual, error) {
	if q.Policies == nil || q.Keys == nil || q.Registry == nil {
		return nil, fmt.Errorf("%w: Querier needs Policies, Keys and Registry", ErrInvalidRequest)
	}
	cfg, err := q.Policies.Config(ctx, in.Project)
	if err != nil {
		return nil, err
	}
	var m *mandate.Mandate
	switch {
	case in.Mandate != "":
		v := q.Verifier
		if v == nil {
			v = &mandate.Verifier{Keys: q.Keys}
		}
		m, err = v.Verify(ctx, in.Mandate, mandate.IssuerName(in.Project))
		if err != nil {
			return nil, err
		}
		if in.AgentID != "" && m.Claims.Subject != in.AgentID {
			return nil, fmt.Errorf("%w: mandate %s is for agent %q, not %q", ErrInvalidRequest, m.Claims.JTI, m.Claims.Subject, in.AgentID)
		}
	case cfg.Required():
		return nil, fmt.Errorf("%w: project %s requires a mandate: pass the token", ErrInvalidRequest, in.Project)
	}
	doc, err := q.Policies.Policies(ctx, in.Project)
	if err != nil {
		return nil, err
	}
	pps, err := mandate.ParsePolicies("project "+in.Project, doc.Policies)
	if err != nil {
		return nil, fmt.Errorf("authz: stored policies of %s: %w", in.Project, err)
	}
	entries, err := q.Registry.List(ctx, in.Project)
	if err != nil {
		return nil, fmt.Errorf("authz: registry of %s: %w", in.Project, err)
	}
	var tools []ToolAction
	for _, e := range entries {
		a, err := ActionOf(e)
		if err != nil {
			continue // the registry validated it; skip what cannot be named
		}
		tools = append(tools, ToolAction{ToolName: e.ToolName, Action: a, Scopes: e.Options.Scopes})
	}
	return Query(ctx, QueryRequest{Project: in.Project, AgentID: in.AgentID, Mandate: m, ProjectPolicies: pps, Tools: tools, State: in.State, Resources: q.Resources})
}

// IsMandateError reports whether err is a mandate verification failure.
func IsMandateError(err error) bool {
	for _, s := range []error{mandate.ErrMalformed, mandate.ErrExpired, mandate.ErrNotYetValid, mandate.ErrSignature, mandate.ErrWrongIssuer, mandate.ErrUnknownKey, mandate.ErrPolicyRefused} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
