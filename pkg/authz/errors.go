package authz

import "errors"

// Errors of the authorization layer.
var (
	// ErrInvalidPolicy: a policy set does not parse or does not validate
	// against the schema. The message names the line.
	ErrInvalidPolicy = errors.New("authz: invalid policy set")
	// ErrNotFound: a project has no policy set.
	ErrNotFound = errors.New("authz: not found")
	// ErrInvalidRequest: a request, config or argument is malformed; the
	// message names the field.
	ErrInvalidRequest = errors.New("authz: invalid request")
	// ErrConflict: the stored policy set is not the version the request
	// was based on (someone changed it meanwhile).
	ErrConflict = errors.New("authz: policy set changed meanwhile")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("authz: store closed")
)
