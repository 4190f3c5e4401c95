package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// HandlerFunc executes one tool call. It returns the call's result, or an
// error: a *card.Error (see Fail) ends the call failed with that code and
// message; any other error ends it failed with internal_error. The context
// ends when the tool's timeout passes (status timeout), when the call is
// canceled (status canceled) or when the runtime shuts down (canceled).
type HandlerFunc func(ctx context.Context, call *Call) (Result, error)

// Tool is one tool a service serves: its registry definition and handler.
type Tool struct {
	// Name is the registry tool_name. Required.
	Name string
	// Description is shown to LLMs by list_tools.
	Description string
	// Parameters is the JSON Schema of the arguments (an object schema).
	// Empty means {"type":"object"}.
	Parameters json.RawMessage
	// Target is the part of the subject after "cmd.tool.", one or more
	// dot-separated tokens ("echo", "atlas.TASK_CREATE"). Default: Name.
	// Ignored for built-ins, which live on cmd.sys.pmo.internal.<Name>.
	Target string
	// AfterExecution is the registered default; default suspend.
	AfterExecution card.AfterExecution
	// Options are the registered options (timeout, args defaults/fixed,
	// risk level, confirmation, Cedar action…).
	Options registry.Options
	// Handler runs the call. Required.
	Handler HandlerFunc
	// Builtin marks a PMO built-in tool (cmd.sys.pmo.internal.*).
	Builtin bool
}

// Entry returns the registry entry of t in a project.
func (t *Tool) Entry(projectID string) *registry.Entry {
	ae := t.AfterExecution
	if ae == "" {
		ae = card.Suspend
	}
	params := t.Parameters
	if len(params) == 0 {
		params = json.RawMessage(`{"type":"object"}`)
	}
	return &registry.Entry{
		ProjectID:      projectID,
		ToolName:       t.Name,
		Description:    t.Description,
		Parameters:     params,
		TargetSubject:  t.subjectTemplate(),
		AfterExecution: ae,
		Options:        t.Options.Clone(),
	}
}

func (t *Tool) subjectTemplate() string {
	if t.Builtin {
		return "cg.{ver}.{project_id}.{channel_id}.cmd.sys.pmo.internal." + t.Name
	}
	target := t.Target
	if target == "" {
		target = t.Name
	}
	return "cg.{ver}.{project_id}.{channel_id}.cmd.tool." + target
}

// filterSubject is the consumer filter of t: its subject in every project
// and channel.
func (t *Tool) filterSubject(ver string) (string, error) {
	tmpl, err := subjects.ParseTemplate(t.subjectTemplate())
	if err != nil {
		return "", fmt.Errorf("worker: tool %s: %w", t.Name, err)
	}
	s, err := tmpl.Render(ver, "PROJECT", "CHANNEL")
	if err != nil {
		return "", fmt.Errorf("worker: tool %s: %w", t.Name, err)
	}
	s.Project, s.Channel = "*", "*"
	return s.String(), nil
}

// Call is one tool call as the handler sees it.
type Call struct {
	// Version, ProjectID and ChannelID come from the command's subject.
	Version   string
	ProjectID string
	ChannelID string
	// ToolName is the tool being called.
	ToolName string
	// Command is the validated command payload.
	Command utp.Command
	// CallCard is the tool.call card the arguments were read from.
	CallCard *card.Card
	// Arguments are the call's arguments after schema validation and the
	// registry's args.defaults / args.fixed; always a JSON object.
	Arguments json.RawMessage
	// Entry is the registry entry the call was validated against.
	Entry *registry.Entry
	// Traceparent is the W3C trace context of the command.
	Traceparent string
	// Delivery is the delivery attempt of the command (1 for the first).
	Delivery int
	// Builtin reports whether the tool is a PMO built-in.
	Builtin bool
	// Admission is the mesh's verified admission of the call
	// (utp.HeaderAdmission), or nil when the call was not admitted by the
	// mesh (a mesh without identities, a project that allows raw commands).
	Admission *utp.Admission
	// Mandate is the caller's mandate token, for tools that evaluate it
	// themselves: the one the mesh verified at admission (the command's
	// CG-Mandate header, whose SHA-256 the card records), or a raw
	// command's card metadata.mandate; "" when the call carries none.
	Mandate string
	// Principal is who made the call: "agent:<agent_id>" or
	// "operator:<name>" (utp.Admission.Principal); for a call without an
	// admission, "agent:" + Command.AgentID.
	Principal string
}

// Bind decodes the arguments into v. A mismatch is a bad_request failure.
func (c *Call) Bind(v any) error {
	if err := json.Unmarshal(c.Arguments, v); err != nil {
		return Fail(card.CodeBadRequest, "arguments: "+err.Error())
	}
	return nil
}

// Result is what a handler returns.
type Result struct {
	// Status defaults to success. Use partial for incomplete results.
	Status card.Status
	// Value is encoded as result. A map or struct may carry
	// "__cg_control": {"after_execution": "terminate"} to override the
	// command's after_execution.
	Value any
}

// OK returns a successful result holding v.
func OK(v any) Result { return Result{Status: card.StatusSuccess, Value: v} }

// Fail returns an error that ends the call failed with code and message.
func Fail(code card.ErrorCode, message string) error {
	return &card.Error{Code: code, Message: message}
}

// FailDetail is Fail with structured detail.
func FailDetail(code card.ErrorCode, message string, detail any) error {
	raw, err := json.Marshal(detail)
	if err != nil {
		raw = nil
	}
	return &card.Error{Code: code, Message: message, Detail: raw}
}

// Errors of the runtime itself.
var (
	// ErrInvalidTool: a Tool definition is incomplete or malformed.
	ErrInvalidTool = errors.New("worker: invalid tool")
	// ErrStopped: the runtime has been stopped.
	ErrStopped = errors.New("worker: stopped")
	// ErrDrainTimeout: Stop's deadline passed with calls still running;
	// they were canceled, and each ended with a canceled result that was
	// reported. A graceful outcome, not a failure of Stop.
	ErrDrainTimeout = errors.New("worker: drain deadline passed")
	// ErrRetryLater, wrapped in a handler's error, says the call could not
	// finish for a passing reason and must run again later: the runtime
	// writes no result, gives the call's claim back and leaves the command
	// for redelivery after 2 s, as when the CardStore is unreachable. The
	// handler must then be safe to run again (idempotent): a catalogue whose
	// change committed but whose receipt could not be written answers the
	// redelivery from its record of the call. A handler that returns it on
	// every run retries for ever.
	ErrRetryLater = errors.New("worker: retry the call later")
	// errCanceledByRequest is the cancel cause of a call ended by
	// cancel_tool_call.
	errCanceledByRequest = errors.New("canceled by cancel_tool_call")
	// errShutdown is the cancel cause of calls still running when the
	// runtime's drain deadline passes.
	errShutdown = errors.New("worker shutting down")
)

func (t *Tool) validate() error {
	if t.Handler == nil {
		return fmt.Errorf("%w: %s has no handler", ErrInvalidTool, t.Name)
	}
	e := t.Entry("validate")
	var err error
	if t.Builtin {
		err = registry.ValidateBuiltin(e)
	} else {
		err = registry.Validate(e)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalidTool, t.Name, err)
	}
	return nil
}
