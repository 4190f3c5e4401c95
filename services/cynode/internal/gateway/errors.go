package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/services/cynode/store"
)

// Error types of the response model's error.type.
const (
	TypeUnauthenticated  = "unauthenticated"
	TypeToolDisabled     = "tool_disabled"
	TypeNotAllowed       = "not_allowed"
	TypeAccessDenied     = "access_denied"
	TypeInvalidArgument  = "invalid_argument"
	TypeSizeLimit        = "size_limit_exceeded"
	TypeResponseTooLarge = "response_too_large"
	TypeNotFound         = "not_found"
	TypeAlreadyExists    = "already_exists"
	TypeConflict         = "conflict"
	TypePolicyViolation  = "policy_violation"
	TypeUnavailable      = "unavailable"
	TypeUpstream         = "upstream_error"
	TypeInternal         = "internal"
)

// codes maps an error type to the UTP error code of the failed tool.result.
var codes = map[string]card.ErrorCode{
	TypeUnauthenticated: card.CodeAuthFailed, TypeToolDisabled: card.CodeAuthFailed,
	TypeNotAllowed: card.CodeAuthFailed, TypeAccessDenied: card.CodeAuthFailed,
	TypeInvalidArgument: card.CodeBadRequest, TypeSizeLimit: card.CodeBadRequest, TypeResponseTooLarge: card.CodeBadRequest,
	TypeNotFound: card.CodeBadRequest, TypeAlreadyExists: card.CodeBadRequest, TypeConflict: card.CodeBadRequest, TypePolicyViolation: card.CodeBadRequest,
	TypeUnavailable: card.CodeUpstreamUnavailable, TypeUpstream: card.CodeUpstreamUnavailable, TypeInternal: card.CodeInternalError,
}

// Error is the response model's error: {type, message, details}.
type Error struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Details any    `json:"details,omitempty"`
}

func (e *Error) Error() string { return e.Type + ": " + e.Message }

// Errorf returns an Error of a type.
func Errorf(typ, format string, a ...any) *Error {
	return &Error{Type: typ, Message: fmt.Sprintf(format, a...)}
}

// With sets the details.
func (e *Error) With(details any) *Error { e.Details = details; return e }

// Envelope is the seed's response model, the result of every CyNodeAI
// tool.result: status success with result, or status error with error
// (then it is the detail of the failed tool.result's error).
type Envelope struct {
	Status string          `json:"status"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

func encodeSuccess(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, Errorf(TypeInternal, "encode result: %v", err)
	}
	return json.Marshal(Envelope{Status: "success", Result: raw})
}

// cardError is the failed tool.result's error: the UTP code of the type,
// the message, and the envelope as detail.
func (e *Error) cardError() *card.Error {
	code, ok := codes[e.Type]
	if !ok {
		code = card.CodeInternalError
	}
	raw, err := json.Marshal(Envelope{Status: "error", Error: e})
	if err != nil {
		raw = nil
	}
	return &card.Error{Code: code, Message: e.Message, Detail: raw}
}

// asError turns any error into an Error: store sentinels map to their
// types, anything unknown is internal.
func asError(err error) *Error {
	var ge *Error
	if errors.As(err, &ge) {
		return ge
	}
	for _, m := range []struct {
		sentinel error
		typ      string
	}{{store.ErrNotFound, TypeNotFound}, {store.ErrExists, TypeAlreadyExists}, {store.ErrConflict, TypeConflict}, {store.ErrInvalid, TypeInvalidArgument}} {
		if errors.Is(err, m.sentinel) {
			// The type says what the sentinel said; the message keeps the
			// store's explanation.
			return &Error{Type: m.typ, Message: strings.TrimPrefix(err.Error(), m.sentinel.Error()+": ")}
		}
	}
	var ce *card.Error
	if errors.As(err, &ce) {
		return Errorf(TypeInternal, "%s", ce.Message)
	}
	return Errorf(TypeInternal, "%v", err)
}
