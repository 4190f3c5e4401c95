package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
	"github.com/utpmesh/utpmesh/pkg/card"
)

func init() {
	register(spec{name: "mcp", order: 45, summary: "serve the project's tools to MCP hosts (stdio, or streamable HTTP with --listen)",
		make: func(e env) command { return &mcpCommand{env: e, stdin: os.Stdin} }})
}

// mcpCommand runs the MCP bridge (pkg/apps/mcpbridge, docs/mcp.md).
type mcpCommand struct {
	env   env
	stdin io.Reader
	// ready, when set, receives the HTTP endpoint once it listens (tests).
	ready chan<- string
}

func (c *mcpCommand) Run(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("mcp", "utpmesh mcp [--project P] [--channel C] [--mandate FILE] [--agent A] [--operator-creds FILE] [--listen ADDR] [--nats URL]", c.env)
	var cf callerFlags
	cf.register(fs, c.env, "mcp")
	listen := fs.String("listen", "", "serve streamable HTTP on ADDR (e.g. 127.0.0.1:8090; port 0 picks one) instead of stdio; each request's identity is its 'Authorization: Bearer <mandate JWT>'")
	callTimeout := fs.Duration("call-timeout", mcpbridge.DefaultCallTimeout, "how long one tools/call waits for its result (the call goes on after that)")
	opCreds := fs.String("operator-creds", "", "an operator's credentials (e.g. ./utpmesh-data/creds/operator.nk): the host's human answer decides operator handoffs (ATP's HEM escalations) as that operator; stdio only")
	refresh := fs.Duration("refresh", mcpbridge.DefaultRefreshInterval, "how often the registry is re-read to announce tool changes to the host (notifications/tools/list_changed)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("mcp takes no arguments, got %q (serve over HTTP with --listen ADDR)", pos)
	}
	if *callTimeout <= 0 {
		return usagef("--call-timeout must be positive, e.g. --call-timeout 5m")
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if *listen != "" && (explicit["mandate"] || explicit["agent"]) {
		return usagef("with --listen every request brings its own mandate as 'Authorization: Bearer <token>'; drop --mandate and --agent (they are for stdio)")
	}
	if *opCreds != "" && *listen != "" {
		return usagef("--operator-creds is for stdio, where the host's human is the operator; over --listen every bearer's host would decide as the operator: serve the operator with a stdio bridge")
	}
	if kind, _ := kindOfCreds(*opCreds); *opCreds != "" && kind != credsOperator {
		return usagef("--operator-creds %s is not an operator's identity: pass the operator's, e.g. --operator-creds %s", *opCreds, operatorCredsHint(*opCreds))
	}
	var id mcpbridge.Identity
	if *listen == "" {
		agentID, token, err := cf.resolve()
		if err != nil {
			return err
		}
		if id, err = mcpbridge.NewIdentity(agentID, token); err != nil {
			return usagef("--mandate %s: %v", cut(cf.describe(), 80), err)
		}
	}
	nc, err := mf.connect(ctx, "mcp")
	if err != nil {
		return err
	}
	defer nc.Close()
	log := slog.New(slog.NewTextHandler(c.env.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var handoffs []mcpbridge.Handoff
	if *opCreds != "" {
		call, name, done, err := c.operatorCall(ctx, mf, *opCreds, pf.project, pf.channel, *callTimeout, log)
		if err != nil {
			return err
		}
		defer done()
		handoffs = operatorHandoffs(call)
		fmt.Fprintf(c.env.stderr, "utpmesh mcp: the host's answers decide operator handoffs (HEM escalations) as operator %s\n", name)
	}
	b, err := mcpbridge.New(mcpbridge.Config{Conn: nc, Project: pf.project, Channel: pf.channel, Version: mf.version,
		CallTimeout: *callTimeout, ServerVersion: Version, Logger: log, Handoffs: handoffs})
	if err != nil {
		return usagef("%v", err)
	}
	defer b.Close()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go b.Watch(wctx, *refresh)
	if *listen == "" {
		fmt.Fprintf(c.env.stderr, "utpmesh mcp: serving project %s over stdio as agent %s; the session's calls are turn %s (utpmesh turns show %s --project %s)\n",
			pf.project, id.AgentID, b.SessionTurn(), b.SessionTurn(), pf.project)
		return b.ServeStdio(ctx, id, c.stdin, c.env.stdout)
	}
	return c.serveHTTP(ctx, b, *listen, pf.project)
}

// operatorCall connects with the operator's credentials file and returns
// the CallFunc of operator handoffs: each call is the operator's
// (agent.Config.Operator), in one turn of this bridge, waiting at most
// timeout. done closes the connection.
func (c *mcpCommand) operatorCall(ctx context.Context, mf *meshFlags, file, project, channel string, timeout time.Duration,
	log *slog.Logger) (call mcpbridge.CallFunc, name string, done func(), err error) {
	_, name = kindOfCreds(file)
	om := *mf
	om.creds = file
	nc, err := om.connect(ctx, "mcp-operator")
	if err != nil {
		return nil, "", nil, fmt.Errorf("--operator-creds: %w", err)
	}
	op, err := agent.New(nc, agent.Config{Project: project, Channel: channel, Version: mf.version, Operator: name, Logger: log})
	if err != nil {
		nc.Close()
		return nil, "", nil, usagef("--operator-creds: %v", err)
	}
	turn := "mcp-operator-" + card.NewID()
	call = func(ctx context.Context, tool string, args json.RawMessage) (*agent.Outcome, error) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return op.Call(cctx, agent.CallRequest{ToolName: tool, Arguments: args, AgentTurnID: turn})
	}
	return call, name, func() { _ = op.Close(); nc.Close() }, nil
}

// serveHTTP serves the bridge on addr until ctx ends.
func (c *mcpCommand) serveHTTP(ctx context.Context, b *mcpbridge.Bridge, addr, project string) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (pick another address with --listen HOST:PORT; port 0 picks a free one)", addr, err)
	}
	// Requests live in ctx: at shutdown the hosts' open streams (the
	// standalone GET stream, a waiting tasks/result) end with it, so
	// Shutdown does not wait out its deadline on them. The UTP calls they
	// wait for go on in the mesh, and a host resumes them as tasks.
	srv := &http.Server{Handler: b.HTTPHandler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	endpoint := "http://" + ln.Addr().String() + mcpbridge.HTTPPath
	fmt.Fprintf(c.env.stderr, "utpmesh mcp: serving project %s on %s (streamable HTTP; send the mandate JWT as 'Authorization: Bearer <token>')\n", project, endpoint)
	if c.ready != nil {
		c.ready <- endpoint
	}
	select {
	case err := <-served:
		return fmt.Errorf("serve %s: %w", endpoint, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shut down %s: %w", endpoint, err)
	}
	return nil
}
