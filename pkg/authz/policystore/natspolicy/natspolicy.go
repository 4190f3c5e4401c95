package natspolicy

import (
	"errors"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// ServiceName is the service token the policy operations share with the
// gate's: cg.<ver>.<project>.<channel>.svc.authz.<op>.
const ServiceName = "authz"

// The policy operations.
const (
	OpPut       = "put"
	OpGet       = "get"
	OpConfigGet = "config_get"
	OpConfigPut = "config_put"
	// OpHistory lists the kept versions of the project's policy set.
	OpHistory = "history"
	// OpHistoryGet returns one kept version with its text.
	OpHistoryGet = "history_get"
	// OpRollback stores a kept version's text as a new version.
	OpRollback = "rollback"
)

// Errors of the policy service's client and server.
var (
	// ErrForbidden matches (errors.Is) a forbidden reply: a write whose
	// signature does not verify or names no identity of the mesh.
	ErrForbidden = errors.New("natspolicy: forbidden")
)

// Wire codes of the policy operations besides svc's common ones.
const (
	CodeInvalidPolicy = "invalid_policy"
	CodeClosed        = "closed"
)

// Codes maps the policy store's sentinels to wire codes and back.
var Codes = svc.Codes{
	{Err: authz.ErrInvalidPolicy, Code: CodeInvalidPolicy},
	{Err: authz.ErrNotFound, Code: svc.CodeNotFound},
	{Err: authz.ErrInvalidRequest, Code: svc.CodeBadRequest},
	{Err: authz.ErrClosed, Code: CodeClosed},
	{Err: authz.ErrConflict, Code: svc.CodeConflict},
	{Err: ErrForbidden, Code: svc.CodeForbidden},
}

// Request and reply bodies.
type (
	// PutRequest is the body of put.
	PutRequest struct {
		Policies string `json:"policies"`
		// BaseVersion, when set, is the version the caller reviewed (0:
		// none stored); the put is refused with conflict if the stored
		// version differs.
		BaseVersion *uint64 `json:"base_version,omitempty"`
	}
	// HistoryReply is the reply of history: the kept versions, newest
	// first.
	HistoryReply struct {
		Versions []authz.PolicyVersion `json:"versions"`
	}
	// HistoryGetRequest is the body of history_get.
	HistoryGetRequest struct {
		Version uint64 `json:"version"`
	}
	// RollbackRequest is the body of rollback: restore Version; the
	// stored version must be BaseVersion.
	RollbackRequest struct {
		Version     uint64 `json:"version"`
		BaseVersion uint64 `json:"base_version"`
	}
	// DocReply is the reply of put and get.
	DocReply struct {
		Doc *authz.PolicyDoc `json:"doc"`
	}
	// ConfigReply is the reply of config_get and config_put; the body of
	// config_put is the config itself.
	ConfigReply struct {
		Config authz.ProjectConfig `json:"config"`
	}
)

// decode decodes a request body of the authz service (empty: {}); a
// malformed one is an error wrapping authz.ErrInvalidRequest.
func decode(data []byte, v any) error { return svc.DecodeAs(data, v, authz.ErrInvalidRequest) }
