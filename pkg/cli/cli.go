package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
)

// Verb is a top-level command a catalogue contributes to the command line:
// `utpmesh NAME …`. The command line registers the verbs of the catalogues
// it selects beside its own commands.
type Verb interface {
	// Name is what the user types after utpmesh.
	Name() string
	// Summary is the verb's line in `utpmesh --help`.
	Summary() string
	// Order places the verb in the help listing (lower first).
	Order() int
	// Run runs the verb with its arguments (after NAME). An error that
	// wraps ErrUsage is a usage mistake (exit 2); any other ends the
	// command with exit 1.
	Run(ctx context.Context, env Env, args []string) error
}

// Env is what the command line gives a verb: its output, its flag and
// subcommand conventions, and tool calls to the mesh.
type Env interface {
	// Stdout is where the verb prints its result.
	Stdout() io.Writer
	// Dispatch runs the subcommand args[0] of the group name (e.g. "tools"
	// or "x y"): with none it prints usage and fails with a usage error,
	// with --help it prints usage, an unknown one gets a did-you-mean.
	Dispatch(ctx context.Context, name, usage string, subs []Sub, args []string) error
	// CallFlags returns the Caller of subcommand name and its flag set
	// (usage is printed by --help) with the flags of a tool call
	// registered: the mesh's connection (--nats, --creds, --timeout,
	// --json, …), the caller (--agent, --mandate), --project (default
	// demo; projectHelp is its help) and --channel. The Caller calls with
	// them once the set is parsed.
	CallFlags(name, usage, projectHelp string) (Caller, *flag.FlagSet)
	// OperatorCallFlags is CallFlags for a subcommand whose tools are an
	// operator's (registry options.principal "operator", e.g. ATP's HEM
	// decisions): the Caller calls as the operator whose credentials it
	// connects with (by default the operator identity of a local mesh,
	// DATA/creds/operator.nk), dispatched on the operator's subject with
	// no mandate. With an agent's credentials it calls as the agent, and
	// the mesh refuses the tools; with the admin's it refuses to call.
	OperatorCallFlags(name, usage, projectHelp string) (Caller, *flag.FlagSet)
	// Parse parses args, flags allowed anywhere, and returns the
	// positional arguments; a flag mistake is a usage error.
	Parse(fs *flag.FlagSet, args []string) ([]string, error)
	// PrintJSON prints a JSON value, indented as every command's --json.
	PrintJSON(raw json.RawMessage) error
}

// Caller makes tool calls with the flags of a parsed CallFlags set.
type Caller interface {
	// Call calls tool with args (marshalled to JSON) in a new turn and
	// returns the result of a successful call; a result of another status
	// is an error naming its code and message (and, for auth_failed, what
	// to pass instead).
	Call(ctx context.Context, tool string, args any) (json.RawMessage, error)
	// JSON reports whether --json was given.
	JSON() bool
}

// Sub is one subcommand of a group (Env.Dispatch).
type Sub struct {
	// Names are the subcommand's name and its aliases; Names[0] is shown.
	Names []string
	// Run runs it with the arguments after its name.
	Run func(ctx context.Context, args []string) error
}

// ErrUsage marks a usage mistake: the command line exits 2 and prints the
// error's message.
var ErrUsage = errors.New("usage")

// Usagef returns a usage error (wrapping ErrUsage) whose message is the
// formatted text alone.
func Usagef(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }
func (e *usageError) Unwrap() error { return ErrUsage }
