package builtins

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// MandateQuerier answers Windley queries (authz.Querier).
type MandateQuerier interface {
	Query(ctx context.Context, in authz.QueryInput) (*authz.Residual, error)
}

var _ MandateQuerier = (*authz.Querier)(nil)

// mandateQueryTool is the Windley Loop built-in: Cedar partial evaluation
// of the caller's mandate against the current booking state.
func (d Deps) mandateQueryTool() worker.Tool {
	return worker.Tool{
		Name: registry.BuiltinMandateQuery,
		Description: "Windley Loop: which tools does the caller's mandate permit in the current booking state? " +
			"Returns the residual policy set (permitted tools and actions, bound booking_object_id, permitted hem_id values, " +
			"remaining conditions) and the Windley context block for the system prompt.",
		Parameters: json.RawMessage(`{"type":"object","additionalProperties":false,"properties":{
			"booking_state":{"type":"string","minLength":1,"description":"current booking state (from atp_get_booking_status); omit when unknown"},
			"mandate":{"type":"string","minLength":1,"description":"token to evaluate; default: the mandate the call carries"}}}`),
		Builtin: true,
		Handler: d.mandateQuery,
	}
}

func (d Deps) mandateQuery(ctx context.Context, call *worker.Call) (worker.Result, error) {
	if d.Mandates == nil {
		return worker.Result{}, worker.Fail(card.CodeBadRequest, "mandate_query: authorization is not enabled on this mesh (mesh.Config.Auth)")
	}
	var a struct {
		State   *string `json:"booking_state"`
		Mandate string  `json:"mandate"`
	}
	if err := call.Bind(&a); err != nil {
		return worker.Result{}, err
	}
	if a.Mandate == "" {
		a.Mandate = call.Mandate // the admitted call's (CG-Mandate) or a raw card's
	}
	r, err := d.Mandates.Query(ctx, authz.QueryInput{Project: call.ProjectID, AgentID: call.Command.AgentID, Mandate: a.Mandate, State: a.State})
	switch {
	case authz.IsMandateError(err):
		return worker.Result{}, worker.Fail(card.CodeAuthFailed, err.Error())
	case errors.Is(err, authz.ErrNotFound), errors.Is(err, authz.ErrInvalidRequest):
		return worker.Result{}, worker.Fail(card.CodeBadRequest, err.Error())
	case err != nil:
		return worker.Result{}, worker.Fail(card.CodeUpstreamUnavailable, "mandate_query: "+err.Error())
	}
	return worker.OK(r), nil
}
