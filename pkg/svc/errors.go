package svc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Errors of the transport itself.
var (
	// ErrUnavailable: no process serves the subject (NATS "no responders"),
	// or the connection is closed.
	ErrUnavailable = errors.New("svc: service unavailable")
	// ErrTimeout: no reply before the deadline.
	ErrTimeout = errors.New("svc: request timed out")
	// ErrBadReply: the reply is not a JSON object of the documented shape.
	ErrBadReply = errors.New("svc: malformed reply")
	// ErrTooLarge: the request is larger than the server accepts.
	ErrTooLarge = errors.New("svc: request too large")
	// ErrBadRequest: the request body is not valid JSON of the expected
	// shape, or the subject is malformed.
	ErrBadRequest = errors.New("svc: bad request")
)

// Wire codes every service may return.
const (
	CodeBadRequest   = "bad_request"
	CodeNotFound     = "not_found"
	CodeConflict     = "conflict"
	CodeTooLarge     = "too_large"
	CodeForbidden    = "forbidden"
	CodeUnavailable  = "unavailable"
	CodeTimeout      = "timeout"
	CodeInternal     = "internal_error"
	headerErrorCode  = "Svc-Error-Code"
	maxMessageInWire = 4096
)

// CodeMap pairs a sentinel error with its wire code.
type CodeMap struct {
	Err  error
	Code string
}

// Codes is a service's table of sentinel errors and wire codes, shared by its
// server (error → code) and client (code → sentinel). Order matters on the
// server: the first entry whose Err matches (errors.Is) wins.
type Codes []CodeMap

// baseCodes are appended to every table.
var baseCodes = Codes{
	{context.DeadlineExceeded, CodeTimeout},
	{ErrBadRequest, CodeBadRequest},
	{ErrTooLarge, CodeTooLarge},
	{ErrUnavailable, CodeUnavailable},
	{ErrTimeout, CodeTimeout},
}

// code returns the wire code of err.
func (c Codes) code(err error) string {
	for _, m := range c {
		if errors.Is(err, m.Err) {
			return m.Code
		}
	}
	for _, m := range baseCodes {
		if errors.Is(err, m.Err) {
			return m.Code
		}
	}
	return CodeInternal
}

// sentinel returns the sentinel error of a wire code, or nil.
func (c Codes) sentinel(code string) error {
	for _, m := range c {
		if m.Code == code {
			return m.Err
		}
	}
	for _, m := range baseCodes {
		if m.Code == code {
			return m.Err
		}
	}
	return nil
}

// ErrorBody is the "error" object of a failed reply.
type ErrorBody struct {
	// Code is the wire code, e.g. "not_found".
	Code string `json:"code"`
	// Message says what is wrong, for a person.
	Message string `json:"message"`
	// Detail is optional structured detail, specific to the code.
	Detail json.RawMessage `json:"detail,omitempty"`
}

// DetailError is an error that carries structured detail for the wire.
type DetailError struct {
	Err    error
	Detail any
}

func (e *DetailError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *DetailError) Unwrap() error { return e.Err }

// WithDetail attaches structured detail to err; the server sends it as
// error.detail.
func WithDetail(err error, detail any) error { return &DetailError{Err: err, Detail: detail} }

// RemoteError is a failed reply as the client sees it. It matches (errors.Is)
// the sentinel its code maps to in the service's Codes table.
type RemoteError struct {
	// Subject is the subject the request was sent on.
	Subject string
	// Code and Message are the reply's error object.
	Code, Message string
	// Detail is the reply's error.detail, if any.
	Detail   json.RawMessage
	sentinel error
}

func (e *RemoteError) Error() string { return e.Message }

// Unwrap returns the sentinel error of the code, if the table knows it.
func (e *RemoteError) Unwrap() error { return e.sentinel }

type errorReply struct {
	Error *ErrorBody `json:"error"`
}

// encodeError renders the reply body for err.
func encodeError(codes Codes, err error) (code string, body []byte) {
	code = codes.code(err)
	msg := err.Error()
	if len(msg) > maxMessageInWire {
		msg = msg[:maxMessageInWire] + "…"
	}
	eb := &ErrorBody{Code: code, Message: msg}
	var de *DetailError
	if errors.As(err, &de) && de.Detail != nil {
		if d, dErr := json.Marshal(de.Detail); dErr == nil {
			eb.Detail = d
		}
	}
	body, mErr := json.Marshal(errorReply{Error: eb})
	if mErr != nil {
		body = []byte(fmt.Sprintf(`{"error":{"code":%q,"message":"unencodable error"}}`, code))
	}
	return code, body
}
