package worker

import (
	"context"
)

// Authorizer decides, after a call's card, registry entry and arguments are
// validated and before its handler runs, whether the call may run. The Cedar
// gate (pkg/authz) is one; a Runtime without an Authorizer runs every call.
// A Runtime with one asks it only about commands the mesh did not admit
// (no valid CG-Admission) in a project that accepts raw commands; an
// admitted command was authorized by the mesh already, and an unadmitted
// one elsewhere fails auth_failed (see AdmissionVerifier).
//
// Authorize returns nil to allow the call. A *card.Error (see Fail and
// FailDetail) ends the call failed with that code, message and detail;
// denials use card.CodeAuthFailed. Any other error means the Authorizer
// could not decide (its policy store is unreachable, say): the command is
// redelivered later and the call is neither run nor failed.
type Authorizer interface {
	Authorize(ctx context.Context, call *Call) error
}

// AuthorizerFunc adapts a function to an Authorizer.
type AuthorizerFunc func(ctx context.Context, call *Call) error

// Authorize calls f.
func (f AuthorizerFunc) Authorize(ctx context.Context, call *Call) error { return f(ctx, call) }

var _ Authorizer = AuthorizerFunc(nil)
