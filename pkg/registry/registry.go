package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// Sentinel errors, tested with errors.Is. Every error of this package and
// of Registry implementations matches one of them (storage failures aside),
// and errors matching ErrReserved also match ErrInvalid.
var (
	// ErrNotFound: no entry for the (project_id, tool_name) pair.
	ErrNotFound = errors.New("registry: tool not found")
	// ErrInvalid: a tool definition (or a key passed to Get/Delete) breaks
	// a validation rule. The error is a *FieldError naming the field.
	ErrInvalid = errors.New("registry: invalid tool definition")
	// ErrReserved: the tool_name belongs to a built-in PMO tool (see
	// ReservedNames). Errors matching ErrReserved also match ErrInvalid.
	ErrReserved = errors.New("registry: reserved tool name")
	// ErrArgs: tool call arguments fail the tool's parameters schema or are
	// not a JSON object. The message names the JSON pointer of the first
	// violation, e.g. "arguments/title: got number, want string".
	ErrArgs = errors.New("registry: invalid arguments")
	// ErrClosed: the registry has been closed.
	ErrClosed = errors.New("registry: closed")
)

// FieldError is the error returned for an invalid definition. Field is the
// JSON name (or dotted path) of the offending field, e.g. "tool_name",
// "options.timeout_seconds", or "tools[2].after_execution" for ParseYAML.
// It matches ErrInvalid, and also ErrReserved for a reserved tool_name.
type FieldError struct {
	// Field is the path of the offending field.
	Field string
	// Msg says what is wrong with it.
	Msg string
	// Reserved is true when the tool_name is a reserved built-in name.
	Reserved bool
}

// Error implements error: "registry: <field>: <msg>".
func (e *FieldError) Error() string { return "registry: " + e.Field + ": " + e.Msg }

// Unwrap returns ErrInvalid, and ErrReserved when Reserved is set.
func (e *FieldError) Unwrap() []error {
	if e.Reserved {
		return []error{ErrReserved, ErrInvalid}
	}
	return []error{ErrInvalid}
}

// prefixed returns a copy of err with prefix prepended to its Field when
// err is a *FieldError, else wraps err under field prefix.
func prefixed(prefix string, err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		f := prefix
		switch {
		case fe.Field == "":
		case fe.Field[0] == '[':
			f = prefix + fe.Field
		default:
			f = prefix + "." + fe.Field
		}
		return &FieldError{Field: f, Msg: fe.Msg, Reserved: fe.Reserved}
	}
	return &FieldError{Field: prefix, Msg: err.Error()}
}

// invalid is shorthand for a *FieldError.
func invalid(field, msg string) error { return &FieldError{Field: field, Msg: msg} }

// Entry is one row of resource.tools: the definition of a tool in a
// project, as the UTP seed §2 lists its fields, plus UpdatedAt.
type Entry struct {
	// ProjectID is the project the tool belongs to (a subject token).
	ProjectID string `json:"project_id"`
	// ToolName is the name agents call the tool by, unique per project.
	ToolName string `json:"tool_name"`
	// Description tells the model what the tool does.
	Description string `json:"description"`
	// Parameters is the JSON Schema (a JSON object with "type":"object")
	// the call arguments must satisfy.
	Parameters json.RawMessage `json:"parameters"`
	// TargetSubject is the subject template (or concrete subject) the tool
	// command is published on, e.g.
	// "cg.{ver}.{project_id}.{channel_id}.cmd.tool.echo".
	TargetSubject string `json:"target_subject"`
	// AfterExecution is copied into the command (suspend or terminate).
	AfterExecution card.AfterExecution `json:"after_execution"`
	// Options are the execution options; see Options.
	Options Options `json:"options"`
	// UpdatedAt is set by the store on every Put (UTC). Any value given to
	// Put is ignored. Omitted from JSON when zero.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// Clone returns a deep copy of e (nil for nil).
func (e *Entry) Clone() *Entry {
	if e == nil {
		return nil
	}
	c := *e
	c.Parameters = slices.Clone(e.Parameters)
	c.Options = e.Options.Clone()
	return &c
}

// Registry stores tool definitions per project. Implementations are safe
// for concurrent use and must pass registrytest.Run.
type Registry interface {
	// Put validates e with Validate (ErrInvalid / ErrReserved), stores a
	// copy with UpdatedAt set to the store's clock, replacing any entry
	// with the same (project_id, tool_name), and returns the stored copy.
	Put(ctx context.Context, e *Entry) (*Entry, error)
	// Get returns the entry, or ErrNotFound. Malformed keys give ErrInvalid.
	Get(ctx context.Context, projectID, toolName string) (*Entry, error)
	// List returns the project's entries sorted by tool_name (byte order);
	// an empty, non-nil slice when there are none.
	List(ctx context.Context, projectID string) ([]*Entry, error)
	// Delete removes the entry, or returns ErrNotFound.
	Delete(ctx context.Context, projectID, toolName string) error
}

// Names of the built-in PMO tools. They are served by the mesh itself on
// cg.<ver>.<project_id>.<channel_id>.cmd.sys.pmo.internal.<tool_name> and
// cannot be registered with Put.
const (
	BuiltinListTools      = "list_tools"
	BuiltinCancelToolCall = "cancel_tool_call"
	BuiltinMandateQuery   = "mandate_query"
)

// ReservedNames returns the reserved (built-in PMO) tool names, sorted.
func ReservedNames() []string {
	return []string{BuiltinCancelToolCall, BuiltinListTools, BuiltinMandateQuery}
}

// IsReserved reports whether name is a built-in PMO tool name. The
// comparison ignores ASCII case so that look-alikes such as "List_Tools"
// are reserved too.
func IsReserved(name string) bool {
	for _, r := range ReservedNames() {
		if strings.EqualFold(name, r) {
			return true
		}
	}
	return false
}

// NotFound returns an error matching ErrNotFound that names the key, for
// Registry implementations.
func NotFound(projectID, toolName string) error {
	return fmt.Errorf("%w: project %q has no tool %q", ErrNotFound, projectID, toolName)
}
