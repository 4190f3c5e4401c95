package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/conformance"
)

// tool runs the tool cases of the conformance kit.
func (c *conformanceCommand) tool(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("conformance tool",
		"utpmesh conformance tool [--tool NAME] [--exec CMD] [--creds AGENT.nk] [--mandate FILE] [--admin-creds admin.nk] [--case NAME]... [--json]", c.env)
	var cf callerFlags
	cf.register(fs, c.env, "conformance-kit")
	name := fs.String("tool", conformance.DefaultTool, "the probe tool's name (its registry tool_name)")
	execCmd := fs.String("exec", "", "run the implementation with 'sh -c CMD' and restart it whenever it exits (needed by the sigkill case; without it, the crash case needs a second instance running)")
	adminCreds := fs.String("admin-creds", "", "the admin identity, to publish commands the mesh did not admit (default "+defaultCredsPath+" if it exists)")
	wait := fs.Duration("wait", 90*time.Second, "how long one case, and the wait for the tool to be ready, may take")
	var cases stringList
	fs.Var(&cases, "case", "run only this case (repeatable, or comma-separated); default all: "+caseList(conformance.ToolCases()))
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *wait <= 0 {
		return usagef("--wait must be positive, e.g. --wait 90s")
	}
	only := splitCases(cases)
	agentID, token, err := cf.resolve()
	if err != nil {
		return err
	}
	nc, err := mf.connect(ctx, "conformance")
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
	cfg := conformance.ToolConfig{Agent: ac, Conn: nc, Tool: *name, Wait: *wait, Only: only}
	if *adminCreds == "" {
		if _, err := os.Stat(defaultCredsPath); err == nil {
			*adminCreds = defaultCredsPath
		}
	}
	if *adminCreds != "" {
		am := *mf
		am.creds = *adminCreds
		anc, err := am.connect(ctx, "conformance-admin")
		if err != nil {
			return fmt.Errorf("--admin-creds: %w", err)
		}
		defer anc.Close()
		cfg.Admin = anc
	}
	if *execCmd != "" {
		p, err := conformance.StartProcess(*execCmd, c.env.stderr)
		if err != nil {
			return usagef("--exec: %v", err)
		}
		defer p.Stop(10 * time.Second)
		cfg.Process = p
	}
	rs, err := conformance.RunTool(ctx, cfg)
	if errors.Is(err, conformance.ErrConfig) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	return report(c.env, rs, mf.json)
}
