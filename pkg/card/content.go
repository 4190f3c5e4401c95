package card

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Status is the outcome of a tool call, as the UTP seed §4.2 lists it.
type Status string

// The tool call statuses.
const (
	StatusSuccess  Status = "success"
	StatusFailed   Status = "failed"
	StatusCanceled Status = "canceled"
	StatusTimeout  Status = "timeout"
	StatusPartial  Status = "partial"
)

// Valid reports whether s is one of the five UTP statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusSuccess, StatusFailed, StatusCanceled, StatusTimeout, StatusPartial:
		return true
	}
	return false
}

// AfterExecution tells the agent runtime what to do with its turn once a
// tool result arrives.
type AfterExecution string

// The after_execution values.
const (
	// Suspend: the turn resumes and decides from the result whether to go on.
	Suspend AfterExecution = "suspend"
	// Terminate: the turn ends with this result as its deliverable.
	Terminate AfterExecution = "terminate"
)

// Valid reports whether a is suspend or terminate.
func (a AfterExecution) Valid() bool { return a == Suspend || a == Terminate }

// ErrorCode is a UTP error code. The list is extensible: tool services may
// use codes of their own, in lower snake case.
type ErrorCode string

// The common UTP error codes.
const (
	CodeToolTimeout         ErrorCode = "tool_timeout"
	CodeAuthFailed          ErrorCode = "auth_failed"
	CodeBadRequest          ErrorCode = "bad_request"
	CodeUpstreamUnavailable ErrorCode = "upstream_unavailable"
	CodeInternalError       ErrorCode = "internal_error"
	// CodeCanceled is used for calls ended by cancel_tool_call or shutdown.
	CodeCanceled ErrorCode = "canceled"
)

// ToolCallContent is the content of a tool.call card.
type ToolCallContent struct {
	// ToolName is the registry name of the tool.
	ToolName string `json:"tool_name"`
	// Arguments are the call's parameters, a JSON object.
	Arguments json.RawMessage `json:"arguments"`
	// TargetSubject is the subject the command is published on.
	TargetSubject string `json:"target_subject"`
}

// Error is the structured error of a failed tool result.
type Error struct {
	// Code is the UTP error code.
	Code ErrorCode `json:"code"`
	// Message says, for a person, what went wrong and what to do.
	Message string `json:"message"`
	// Detail is optional structured detail (any JSON value).
	Detail json.RawMessage `json:"detail,omitempty"`
}

// Error implements the error interface.
func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// ToolResultContent is the content of a tool.result card (ToolResultContent
// in the UTP seed). Status and Error are the primary sources of failure
// semantics.
type ToolResultContent struct {
	// Status is the outcome of the call.
	Status Status `json:"status"`
	// AfterExecution is the value from the command, or the override from
	// Result.__cg_control.after_execution.
	AfterExecution AfterExecution `json:"after_execution"`
	// Result is the tool's output, any JSON value (usually an object).
	// For failures it also carries error_code and error_message.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is set when Status is not success.
	Error *Error `json:"error,omitempty"`
}

// ControlOverride returns result.__cg_control.after_execution when result is
// an object holding a valid value there.
func ControlOverride(result json.RawMessage) (AfterExecution, bool) {
	r := bytes.TrimSpace(result)
	if len(r) == 0 || r[0] != '{' {
		return "", false
	}
	var probe struct {
		Control *struct {
			AfterExecution AfterExecution `json:"after_execution"`
		} `json:"__cg_control"`
	}
	if json.Unmarshal(r, &probe) != nil || probe.Control == nil || !probe.Control.AfterExecution.Valid() {
		return "", false
	}
	return probe.Control.AfterExecution, true
}

// EffectiveAfterExecution returns the after_execution that governs the turn:
// the result's __cg_control override when present and valid, else fallback.
func EffectiveAfterExecution(result json.RawMessage, fallback AfterExecution) AfterExecution {
	if ae, ok := ControlOverride(result); ok {
		return ae
	}
	return fallback
}

// ToolCall decodes the content of a tool.call card.
func (c *Card) ToolCall() (*ToolCallContent, error) {
	if c.Type != TypeToolCall {
		return nil, fmt.Errorf("%w: card %s is %q, not %q", ErrWrongType, c.CardID, c.Type, TypeToolCall)
	}
	tc, ok := parseToolCall(c.Content)
	if !ok {
		tc = ToolCallContent{}
		if err := json.Unmarshal(c.Content, &tc); err != nil {
			return nil, fmt.Errorf("%w: tool.call content: %v", ErrInvalid, err)
		}
	}
	if tc.ToolName == "" {
		return nil, fmt.Errorf("%w: tool.call content.tool_name is required", ErrInvalid)
	}
	args := bytes.TrimSpace(tc.Arguments)
	if len(args) > 0 && args[0] != '{' && !bytes.Equal(args, []byte("null")) {
		return nil, fmt.Errorf("%w: tool.call content.arguments must be a JSON object", ErrInvalid)
	}
	return &tc, nil
}

// ToolResult decodes the content of a tool.result card.
func (c *Card) ToolResult() (*ToolResultContent, error) {
	if c.Type != TypeToolResult {
		return nil, fmt.Errorf("%w: card %s is %q, not %q", ErrWrongType, c.CardID, c.Type, TypeToolResult)
	}
	tr, ok := parseToolResult(c.Content)
	if !ok {
		tr = ToolResultContent{}
		if err := json.Unmarshal(c.Content, &tr); err != nil {
			return nil, fmt.Errorf("%w: tool.result content: %v", ErrInvalid, err)
		}
	}
	if !tr.Status.Valid() {
		return nil, fmt.Errorf("%w: tool.result content.status %q is not one of success|failed|canceled|timeout|partial", ErrInvalid, tr.Status)
	}
	if !tr.AfterExecution.Valid() {
		return nil, fmt.Errorf("%w: tool.result content.after_execution %q is not suspend|terminate", ErrInvalid, tr.AfterExecution)
	}
	if tr.Status != StatusSuccess && tr.Status != StatusPartial && tr.Error == nil {
		return nil, fmt.Errorf("%w: tool.result content.error is required when status is %q", ErrInvalid, tr.Status)
	}
	return &tr, nil
}

// NewResultContent builds the content of a failed (or timed-out, canceled)
// tool.result card with both error shapes the UTP seed recommends:
// error.{code,message,detail} and result.{error_code,error_message}.
func NewResultContent(status Status, ae AfterExecution, code ErrorCode, message string, detail json.RawMessage) ToolResultContent {
	res, _ := json.Marshal(map[string]string{"error_code": string(code), "error_message": message})
	return ToolResultContent{
		Status:         status,
		AfterExecution: ae,
		Result:         res,
		Error:          &Error{Code: code, Message: message, Detail: detail},
	}
}
