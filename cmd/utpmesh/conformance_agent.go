package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
	"github.com/utpmesh/utpmesh/pkg/conformance"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// agent serves the Go probe and runs an agent program through the agent
// cases of the conformance kit.
func (c *conformanceCommand) agent(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("conformance agent",
		"utpmesh conformance agent --exec CMD [--creds WORKER.nk] [--tool NAME] [--case NAME]... [--json]", c.env)
	name := fs.String("tool", conformance.DefaultTool, "the probe tool the kit serves and the program calls")
	execCmd := fs.String("exec", "", "the agent program: run with 'sh -c CMD' once per case, a request on its stdin (required)")
	wait := fs.Duration("wait", 90*time.Second, "how long one case may take")
	var cases stringList
	fs.Var(&cases, "case", "run only this case (repeatable, or comma-separated); default all: "+caseList(conformance.AgentCases()))
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *execCmd == "" {
		return usagef("--exec is required: the command that runs your agent program, e.g. --exec \"python3 agent.py --creds utpmesh-data/creds/agent-demo.nk --mandate kit.jwt\"")
	}
	if *wait <= 0 {
		return usagef("--wait must be positive, e.g. --wait 90s")
	}
	nc, err := mf.connect(ctx, "conformance-agent")
	if err != nil {
		return err
	}
	defer nc.Close()
	log := slog.New(slog.NewTextHandler(c.env.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	gate, err := natsauthz.NewRemoteGate(nc, natsauthz.RemoteConfig{Logger: log})
	if err != nil {
		return err
	}
	rt, err := worker.Start(ctx, nc, []worker.Tool{conformance.Probe(*name, nil)}, worker.WithProjects(pf.project),
		worker.WithChannel(pf.channel), worker.WithVersion(mf.version), worker.WithAuthorizer(gate), worker.WithLogger(log),
		worker.WithServiceVersion(Version))
	if err != nil {
		return fmt.Errorf("serve the probe %s (--creds must be its worker identity): %w", *name, err)
	}
	defer func() { _ = rt.Stop(context.WithoutCancel(ctx)) }()
	rs, err := conformance.RunAgent(ctx, conformance.AgentConfig{Command: *execCmd, Tool: *name, Stderr: c.env.stderr, Wait: *wait, Only: splitCases(cases)})
	if errors.Is(err, conformance.ErrConfig) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	return report(c.env, rs, mf.json)
}

// caller is the Go SDK's agent program of the contract: a request on
// stdin, one result line per call on stdout.
func (c *conformanceCommand) caller(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("conformance caller", "utpmesh conformance caller [--creds AGENT.nk] [--mandate FILE] < request.json", c.env)
	var cf callerFlags
	cf.register(fs, c.env, "conformance-kit")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	agentID, token, err := cf.resolve()
	if err != nil {
		return err
	}
	nc, err := mf.connect(ctx, "conformance-caller")
	if err != nil {
		return err
	}
	defer nc.Close()
	ac, err := agent.New(nc, agent.Config{Project: pf.project, Channel: pf.channel, AgentID: agentID, Version: mf.version, Mandate: token,
		Logger: slog.New(slog.NewTextHandler(c.env.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return usagef("%v", err)
	}
	defer ac.Close()
	err = conformance.Caller(ctx, ac, os.Stdin, c.env.stdout)
	if errors.Is(err, conformance.ErrConfig) {
		return usagef("%v", err)
	}
	return err
}

// report prints the results and fails when a case failed.
func report(e env, rs []conformance.Result, asJSON bool) error {
	if err := conformance.Print(e.stdout, rs, asJSON); err != nil {
		return err
	}
	n := 0
	for _, r := range rs {
		if r.Outcome == conformance.Fail {
			n++
		}
	}
	if n > 0 {
		return fmt.Errorf("%d of %d cases failed", n, len(rs))
	}
	return nil
}

// splitCases reads the --case values: repeated and comma-separated.
func splitCases(cases []string) []string {
	var only []string
	for _, c := range cases {
		for _, n := range strings.Split(c, ",") {
			if n = strings.TrimSpace(n); n != "" {
				only = append(only, n)
			}
		}
	}
	return only
}

// caseList lists case names for the help text.
func caseList(cases [][2]string) string {
	names := make([]string, len(cases))
	for i, c := range cases {
		names[i] = c[0]
	}
	return strings.Join(names, ", ")
}
