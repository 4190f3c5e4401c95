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

// OperatorCallFlags implements cli.Env: the calls are the operator's
// (resolveOperator): --creds, else the local mesh's operator.nk; no
// --agent or --mandate (an agent's credentials call with the demo mandate,
// and the mesh refuses the operator's tools to them).
func (v verbEnv) OperatorCallFlags(name, usage, projectHelp string) (cli.Caller, *flag.FlagSet) {
	t := &toolCaller{name: name, operator: true}
	fs := newFlagSet(name, usage, v.env)
	t.mf.register(fs, v.env)
	fs.Lookup("creds").Usage = "the operator's credentials (default $NATS_CREDS, else " + defaultOperatorCredsPath + " if it exists: the operator identity of a local 'utpmesh up')"
	t.cf.defAgent, t.cf.env = "cli", v.env
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
	// operator: the calls are an operator's (OperatorCallFlags).
	operator bool
}

var _ cli.Caller = (*toolCaller)(nil)

// JSON implements cli.Caller.
func (t *toolCaller) JSON() bool { return t.mf.json }

// Call implements cli.Caller: it makes the call and returns its
// successful result; a failure is an error naming the code and message.
func (t *toolCaller) Call(ctx context.Context, tool string, args any) (json.RawMessage, error) {
	cfg := agent.Config{Project: *t.project, Channel: *t.channel, Version: t.mf.version}
	asAgent := !t.operator
	if t.operator {
		credsFile, name, agentCreds, err := resolveOperator(t.mf.creds)
		if err != nil {
			return nil, err
		}
		t.mf.creds, cfg.Operator, asAgent = credsFile, name, agentCreds
	}
	if asAgent {
		agentID, token, err := t.cf.resolve()
		if err != nil {
			return nil, err
		}
		cfg.AgentID, cfg.Mandate, cfg.Operator = agentID, token, ""
	}
	nc, err := t.mf.connect(ctx, t.name)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	ag, err := agent.New(nc, cfg)
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
	if err != nil && t.operator && !asAgent {
		return nil, fmt.Errorf("%s as operator %s: %w (an operator's calls need the operator's credentials: --creds %s)", tool, cfg.Operator, err, operatorCredsHint(t.mf.creds))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	if r := out.Result; r.Status != card.StatusSuccess {
		if t.operator && asAgent && r.Error != nil && r.Error.Code == card.CodeAuthFailed {
			return nil, fmt.Errorf("%s %s: auth_failed: %s (the calls were made as agent %s: --creds %s is an agent's; an operator decides: pass --creds %s)",
				t.name, r.Status, r.Error.Message, cfg.AgentID, t.mf.creds, operatorCredsHint(t.mf.creds))
		}
		return nil, t.cf.resultErr(t.name, out.Result, *t.project)
	}
	return out.Result.Result, nil
}
