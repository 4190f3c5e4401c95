package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
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
	fs, mf, pf := newProjectFlagSet("mcp", "utpmesh mcp [--project P] [--channel C] [--mandate FILE] [--agent A] [--listen ADDR] [--nats URL]", c.env)
	var cf callerFlags
	cf.register(fs, c.env, "mcp")
	listen := fs.String("listen", "", "serve streamable HTTP on ADDR (e.g. 127.0.0.1:8090; port 0 picks one) instead of stdio; each request's identity is its 'Authorization: Bearer <mandate JWT>'")
	callTimeout := fs.Duration("call-timeout", mcpbridge.DefaultCallTimeout, "how long one tools/call waits for its result (the call goes on after that)")
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
	b, err := mcpbridge.New(mcpbridge.Config{Conn: nc, Project: pf.project, Channel: pf.channel, Version: mf.version,
		CallTimeout: *callTimeout, ServerVersion: Version, Logger: log})
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
