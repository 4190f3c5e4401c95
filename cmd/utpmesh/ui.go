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
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/internal/portcheck"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/apps/webui"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

func init() {
	register(spec{name: "ui", order: 64, summary: "serve the web UI: live turns, call timelines, confirmations, replay",
		make: func(e env) command { return &uiCommand{env: e} }})
}

// defaultUIAgent is the agent the UI's calls are made as when neither
// --agent nor a mandate names one.
const defaultUIAgent = "utpmesh-ui"

// uiConfig configures the web UI (startUI). The zero values of the
// optional fields are the defaults of 'utpmesh ui'.
type uiConfig struct {
	// Listen is the HTTP address; default 127.0.0.1:8080 (port 0: any).
	Listen string
	// Project and Channel are what the UI shows; default demo and the
	// agent default channel.
	Project, Channel string
	// Version is the protocol version token; default subjects.DefaultVersion.
	Version string
	// Token is the access token; empty: a new random one. Open switches
	// it off (logged at WARN).
	Token string
	Open  bool
	// AgentID and Mandate are who the Confirm, Cancel and Replay calls are
	// made as: Mandate is the compact token (not @FILE); AgentID defaults
	// to the mandate's sub, else utpmesh-ui.
	AgentID, Mandate string
	// Timeout bounds one request to the mesh's services and one
	// confirm/cancel call; default 30s.
	Timeout time.Duration
	// Logger; default: discard.
	Logger *slog.Logger
	// Store is the CardStore the UI reads; default a natsstore client on
	// nc ('utpmesh up' may pass its own store).
	Store cardstore.Store
	// Operator makes the escalation decisions (/escalations) as the
	// operator of --operator-creds; nil: the page says to pass them.
	// An approved mandate expansion is narrowed from Mandate.
	Operator webui.OperatorCall
}

// startUI serves the web UI over the mesh reachable on nc until stop is
// called. url is what to open in a browser (it carries the access token
// unless cfg.Open). 'utpmesh up' wires it as:
//
//	url, stopUI, err := startUI(ctx, m.Conn(), uiConfig{Listen: *uiListen, Project: projects[0],
//		Version: cfg.ProtocolVersion, Mandate: demoMandate, Logger: log})
func startUI(ctx context.Context, nc *nats.Conn, cfg uiConfig) (url string, stop func(), err error) {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:8080"
	}
	if cfg.Project == "" {
		cfg.Project = "demo"
	}
	if cfg.Channel == "" {
		cfg.Channel = agent.DefaultChannel
	}
	if cfg.Version == "" {
		cfg.Version = subjects.DefaultVersion
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Open && cfg.Token != "" {
		return "", nil, usagef("--ui-token and --ui-open contradict each other: give a token, or open the UI, not both")
	}
	if !cfg.Open && cfg.Token == "" {
		cfg.Token = webui.NewToken()
	}
	if cfg.AgentID == "" && cfg.Mandate != "" {
		m, err := mandate.Decode(cfg.Mandate)
		if err != nil {
			return "", nil, usagef("--mandate: %v", err)
		}
		cfg.AgentID = m.Claims.Subject
	}
	if cfg.AgentID == "" {
		cfg.AgentID = defaultUIAgent
	}
	if cfg.Store == nil {
		store, err := natsstore.NewClient(nc, svc.WithVersion(cfg.Version), svc.WithChannel(cfg.Channel), svc.WithTimeout(cfg.Timeout))
		if err != nil {
			return "", nil, usagef("%v", err)
		}
		cfg.Store = store
	}
	ag, err := agent.New(nc, agent.Config{Project: cfg.Project, Channel: cfg.Channel, AgentID: cfg.AgentID, Version: cfg.Version,
		Mandate: cfg.Mandate, Logger: cfg.Logger})
	if err != nil {
		return "", nil, usagef("%v", err)
	}
	ui, err := webui.New(webui.Config{Store: cfg.Store, Conn: nc, Version: cfg.Version, Project: cfg.Project, Agent: ag,
		Mandate: cfg.Mandate, Token: cfg.Token, Open: cfg.Open, CallTimeout: cfg.Timeout, Logger: cfg.Logger,
		Operator: cfg.Operator, Escalations: uiEscalations(cfg.Mandate)})
	if err != nil {
		_ = ag.Close()
		if errors.Is(err, webui.ErrInvalid) {
			return "", nil, usagef("%v", err)
		}
		return "", nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		ui.Close()
		_ = ag.Close()
		return "", nil, fmt.Errorf("listen on %s: %w (pick another address with --listen HOST:PORT; port 0 picks a free one)", cfg.Listen, err)
	}
	srv := &http.Server{Handler: ui, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Logger.Error("ui: serve", "err", err)
		}
	}()
	url = "http://" + ln.Addr().String() + "/"
	if cfg.Open {
		host, _, _ := net.SplitHostPort(ln.Addr().String())
		where := "this machine"
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			where = "the network"
		}
		cfg.Logger.Warn("ui: access token OFF (--ui-open): anyone on "+where+" who can reach the UI can confirm, cancel and replay calls",
			"listen", ln.Addr().String(), "agent_id", cfg.AgentID)
	} else {
		url += "?token=" + cfg.Token
	}
	cfg.Logger.Info("ui: serving", "listen", ln.Addr().String(), "project", cfg.Project, "agent_id", cfg.AgentID, "open", cfg.Open)
	stop = func() {
		ui.Close() // ends the event streams, so Shutdown does not wait for them
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
		<-served
		_ = ag.Close()
	}
	return url, stop, nil
}

// defaultUIListen is the UI's address when none is given: the one 'utpmesh
// up' serves its own UI on, so a local up's is usually there already.
var defaultUIListen = "127.0.0.1:8080"

// uiListenAddr is where 'utpmesh ui' listens: --listen as given; when it
// was not given and the default is taken (a local 'utpmesh up' serves its
// UI there), a free port on the same host, said on w. A given address
// that is taken is an error naming what to pass.
func uiListenAddr(fs *flag.FlagSet, listen string, w io.Writer) (string, error) {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "listen" })
	err := portcheck.Free(listen)
	switch {
	case err == nil:
		return listen, nil
	case !errors.Is(err, portcheck.ErrInUse):
		return "", usagef("--listen %s: %v (want HOST:PORT, e.g. 127.0.0.1:8080; port 0 picks a free one)", listen, err)
	case given:
		return "", fmt.Errorf("ui %v; is a 'utpmesh up' or another 'utpmesh ui' serving there? pass --listen 127.0.0.1:0 for a free port", err)
	}
	host, _, _ := net.SplitHostPort(listen)
	fmt.Fprintf(w, "utpmesh ui: %s is taken (a local 'utpmesh up' serves its own UI there, at the ui address of its banner); listening on a free port of %s instead (--listen picks one)\n", listen, host)
	return net.JoinHostPort(host, "0"), nil
}

type uiCommand struct{ env env }

func (c *uiCommand) Run(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("ui", "utpmesh ui [--nats URL] [--listen 127.0.0.1:8080] [--project demo] [--mandate TOKEN|@FILE] [--operator-creds FILE] [--ui-token T | --ui-open]", c.env)
	opCreds := fs.String("operator-creds", "", "an operator's credentials (e.g. ./utpmesh-data/creds/operator.nk): /escalations lists the catalogues' items waiting for an operator (ATP's HEM tasks) and decides them as that operator")
	listen := fs.String("listen", defaultUIListen, "HTTP address of the UI (HOST:PORT; port 0 picks a free one; when the default is taken, as a local 'utpmesh up' takes it for its own UI, a free port is picked and said)")
	token := fs.String("ui-token", c.env.getenv("UTPMESH_UI_TOKEN"), "access token of the UI, at least 16 characters (default $UTPMESH_UI_TOKEN, else a new random one, printed in the URL)")
	open := fs.Bool("ui-open", false, "switch the access token off: anyone who can reach --listen can use the UI (logged at WARN)")
	var cf callerFlags
	cf.register(fs, c.env, defaultUIAgent)
	var lf logFlags
	lf.register(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q (ui takes flags only; run 'utpmesh ui --help')", pos[0])
	}
	if err := card.ValidateName("project_id", pf.project); err != nil {
		return usagef("--project: %v", err)
	}
	if *token != "" && len(*token) < 16 {
		return usagef("--ui-token is %d characters; use at least 16 (or leave it out for a random one)", len(*token))
	}
	log, err := lf.logger(c.env.stderr)
	if err != nil {
		return err
	}
	agentID, mandateToken, err := cf.resolve()
	if err != nil {
		return err
	}
	listenAddr, err := uiListenAddr(fs, *listen, c.env.stderr)
	if err != nil {
		return err
	}
	nc, err := mf.connect(ctx, "ui")
	if err != nil {
		return err
	}
	defer nc.Close()
	var operator webui.OperatorCall
	if *opCreds != "" {
		if kind, _ := kindOfCreds(*opCreds); kind != credsOperator {
			return usagef("--operator-creds %s is not an operator's identity: pass the operator's, e.g. --operator-creds %s", *opCreds, operatorCredsHint(*opCreds))
		}
		call, _, done, err := (&mcpCommand{env: c.env}).operatorCall(ctx, mf, *opCreds, pf.project, pf.channel, mf.timeout, log)
		if err != nil {
			return err
		}
		defer done()
		operator = webui.OperatorCall(call)
	}
	url, stop, err := startUI(ctx, nc, uiConfig{Listen: listenAddr, Project: pf.project, Channel: pf.channel, Version: mf.version,
		Token: *token, Open: *open, AgentID: agentID, Mandate: mandateToken, Timeout: mf.timeout, Logger: log, Operator: operator})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.env.stdout, "utpmesh ui: project %s at %s\n", pf.project, url)
	fmt.Fprintf(c.env.stdout, "Press Ctrl-C to stop.\n")
	<-ctx.Done()
	stop()
	return nil
}
