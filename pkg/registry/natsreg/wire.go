package natsreg

import (
	"encoding/json"

	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// ServiceName is the service token of the registry's svc subjects:
// cg.<ver>.<project>.<channel>.svc.registry.<op>.
const ServiceName = "registry"

// The operations, the last token of the subject.
const (
	OpPut    = "put"
	OpGet    = "get"
	OpList   = "list"
	OpDelete = "delete"
)

// Ops says which requests a client resends while unanswered (svc.Ops):
// the reads. A put (a new version) and a delete are sent once.
var Ops = svc.Ops{OpGet: svc.Read, OpList: svc.Read, OpPut: svc.Once, OpDelete: svc.Once}

// Wire error codes of the registry service (besides svc's common ones).
// A definition that breaks a validation rule is svc.CodeBadRequest, or
// CodeReserved when its tool_name is a built-in PMO name.
const (
	CodeNotFound = svc.CodeNotFound
	CodeReserved = "reserved"
	CodeClosed   = "closed"
)

// Codes maps the registry's sentinel errors to wire codes and back. On the
// server the first entry whose error matches wins; on the client a code
// maps to the first entry that has it. CodeReserved therefore comes back
// as an error that matches both registry.ErrReserved and
// registry.ErrInvalid, as a reserved-name error does locally, and
// bad_request comes back as registry.ErrInvalid.
var Codes = svc.Codes{
	{Err: errReserved, Code: CodeReserved}, // client: code → both sentinels
	{Err: registry.ErrReserved, Code: CodeReserved},
	{Err: registry.ErrNotFound, Code: CodeNotFound},
	{Err: registry.ErrInvalid, Code: svc.CodeBadRequest},
	{Err: registry.ErrClosed, Code: CodeClosed},
	{Err: ErrForbidden, Code: svc.CodeForbidden},
}

// errReserved is the client-side sentinel of CodeReserved.
var errReserved error = &reservedError{}

type reservedError struct{}

func (*reservedError) Error() string { return registry.ErrReserved.Error() }

// Unwrap returns both sentinels, like a reserved *registry.FieldError.
func (*reservedError) Unwrap() []error {
	return []error{registry.ErrReserved, registry.ErrInvalid}
}

// Request and reply bodies, one pair per operation. See doc.go.
type (
	putRequest struct {
		Entry *registry.Entry `json:"entry"`
	}
	// putRequestWire is what the client sends: the entry already encoded.
	putRequestWire struct {
		Entry json.RawMessage `json:"entry"`
	}
	keyRequest struct {
		ToolName string `json:"tool_name"`
	}
	entryReply struct {
		Entry *registry.Entry `json:"entry"`
	}
	listRequest struct{}
	listReply   struct {
		Entries []*registry.Entry `json:"entries"`
	}
	emptyReply struct{}
	// fieldDetail is error.detail of a bad_request or reserved reply
	// caused by a *registry.FieldError.
	fieldDetail struct {
		Field  string `json:"field"`
		Reason string `json:"reason"`
	}
)
