package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
	"github.com/utpmesh/utpmesh/pkg/conformance"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

func init() {
	register(spec{name: "conformance", order: 90, summary: "run the conformance kit against a tool implementation (any language) on a live mesh",
		make: func(e env) command { return &conformanceCommand{env: e} }})
}

type conformanceCommand struct{ env env }

const conformanceUsage = `Usage:
utpmesh conformance tool [--tool conformance_probe] [--exec CMD] [--creds AGENT.nk] [--mandate FILE]
                         [--admin-creds admin.nk] [--case NAME]... [--json]
                         drive an implementation of the probe tool through the protocol's cases
                         and print PASS|FAIL|SKIP <case> (§section) <detail> per case; exit 1 on a FAIL
utpmesh conformance agent --exec CMD [--creds WORKER.nk] [--tool conformance_probe] [--case NAME]... [--json]
                         serve the probe tool (Go) and run an agent program through the agent cases
utpmesh conformance probe [--creds WORKER.nk] [--tool conformance_probe] [--project P]
                         serve the probe tool with the Go SDK (the reference implementation)
utpmesh conformance caller [--creds AGENT.nk] [--mandate FILE] < request.json
                         the Go SDK's agent program of the contract

The probe and agent program contracts are in docs/write-a-tool-service.md,
part D, and in the doc of package pkg/conformance.
`

func (c *conformanceCommand) Run(ctx context.Context, args []string) error {
	return dispatch(ctx, c.env, "conformance", conformanceUsage, []sub{
		{names: []string{"tool"}, run: c.tool},
		{names: []string{"agent"}, run: c.agent},
		{names: []string{"probe"}, run: c.probe},
		{names: []string{"caller"}, run: c.caller},
	}, args)
}

// probe serves the Go probe with the mesh's remote Cedar gate, as
// 'utpmesh worker' serves a catalogue, until ctx ends.
func (c *conformanceCommand) probe(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("conformance probe", "utpmesh conformance probe [--creds WORKER.nk] [--tool NAME] [--project P]", c.env)
	name := fs.String("tool", conformance.DefaultTool, "the probe tool's name")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	nc, err := mf.connect(ctx, "conformance-probe")
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
		return err
	}
	fmt.Fprintf(c.env.stdout, "probe %s serving %s in project %s\n", rt.InstanceID(), *name, pf.project)
	<-ctx.Done()
	return rt.Stop(context.WithoutCancel(ctx))
}
