package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/cli"
)

// registerVerb adds a catalogue's verb to the command table (catalogues.go
// registers the verbs of the catalogues the CLI selects).
func registerVerb(v cli.Verb) {
	register(spec{name: v.Name(), order: v.Order(), summary: v.Summary(),
		make: func(e env) command { return &verbCommand{verb: v, env: e} }})
}

// verbCommand runs a catalogue's verb in the CLI's environment.
type verbCommand struct {
	verb cli.Verb
	env  env
}

// Run runs the verb; an error wrapping cli.ErrUsage is a usage error
// (exit 2).
func (c *verbCommand) Run(ctx context.Context, args []string) error {
	err := c.verb.Run(ctx, verbEnv{c.env}, args)
	var ue *usageError
	if errors.Is(err, cli.ErrUsage) && !errors.As(err, &ue) {
		return &usageError{msg: err.Error()}
	}
	return err
}

// verbEnv is the cli.Env of the CLI: its flag and subcommand conventions
// and tool calls made with its flags.
type verbEnv struct{ env env }

var _ cli.Env = verbEnv{}

// Stdout implements cli.Env.
func (v verbEnv) Stdout() io.Writer { return v.env.stdout }

// Dispatch implements cli.Env.
func (v verbEnv) Dispatch(ctx context.Context, name, usage string, subs []cli.Sub, args []string) error {
	ss := make([]sub, len(subs))
	for i, s := range subs {
		ss[i] = sub{names: s.Names, run: s.Run}
	}
	return dispatch(ctx, v.env, name, usage, ss, args)
}

// CallFlags implements cli.Env.
func (v verbEnv) CallFlags(name, usage, projectHelp string) (cli.Caller, *flag.FlagSet) {
	t := &toolCaller{name: name}
	fs := newFlagSet(name, usage, v.env)
	t.mf.register(fs, v.env)
	t.cf.register(fs, v.env, "cli")
	t.project = fs.String("project", "demo", projectHelp)
	t.channel = fs.String("channel", agent.DefaultChannel, "channel to call on")
	return t, fs
}

// Parse implements cli.Env.
func (v verbEnv) Parse(fs *flag.FlagSet, args []string) ([]string, error) { return parse(fs, args) }

// PrintJSON implements cli.Env.
func (v verbEnv) PrintJSON(raw json.RawMessage) error {
	var x any
	if err := json.Unmarshal(raw, &x); err != nil {
		return err
	}
	return writeJSON(v.env.stdout, x)
}

// toolCaller holds the flags of a verb's subcommand and makes one tool
// call with them.
type toolCaller struct {
	name    string
	mf      meshFlags
	cf      callerFlags
	project *string
	channel *string
}

var _ cli.Caller = (*toolCaller)(nil)

// JSON implements cli.Caller.
func (t *toolCaller) JSON() bool { return t.mf.json }

// Call implements cli.Caller: it makes the call and returns its
// successful result; a failure is an error naming the code and message.
func (t *toolCaller) Call(ctx context.Context, tool string, args any) (json.RawMessage, error) {
	agentID, token, err := t.cf.resolve()
	if err != nil {
		return nil, err
	}
	nc, err := t.mf.connect(ctx, t.name)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	ag, err := agent.New(nc, agent.Config{Project: *t.project, Channel: *t.channel, AgentID: agentID, Version: t.mf.version, Mandate: token})
	if err != nil {
		return nil, usagef("%v", err)
	}
	defer ag.Close()
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, t.mf.timeout)
	defer cancel()
	out, err := ag.Call(cctx, agent.CallRequest{ToolName: tool, Arguments: raw, AgentTurnID: "cli-" + card.NewID()})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	if out.Result.Status != card.StatusSuccess {
		return nil, t.cf.resultErr(t.name, out.Result, *t.project)
	}
	return out.Result.Result, nil
}
