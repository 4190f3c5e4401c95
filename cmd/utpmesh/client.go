package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/subjects"
)

// meshFlags are the flags of every subcommand that talks to a running mesh
// as a client: where NATS is, the protocol version, and how long a request
// may take.
type meshFlags struct {
	url     string
	version string
	timeout time.Duration
	json    bool
}

// register adds --nats, --protocol, --timeout and --json to fs.
func (m *meshFlags) register(fs *flag.FlagSet, e env) {
	fs.StringVar(&m.url, "nats", natsURL(e), "NATS server URL (default $NATS_URL or nats://127.0.0.1:4222)")
	fs.StringVar(&m.version, "protocol", subjects.DefaultVersion, "UTP protocol version token of the mesh's subjects")
	fs.DurationVar(&m.timeout, "timeout", 10*time.Second, "how long one request to the mesh may take")
	fs.BoolVar(&m.json, "json", false, "print JSON instead of a table")
}

// connect dials NATS. The error says how to start a mesh when none answers.
func (m *meshFlags) connect(ctx context.Context, name string) (*nats.Conn, error) {
	if err := subjects.ValidateToken("version", m.version); err != nil {
		return nil, usagef("--protocol: %v", err)
	}
	if m.timeout <= 0 {
		return nil, usagef("--timeout must be positive, e.g. --timeout 10s")
	}
	nc, err := nats.Connect(m.url, nats.Name("utpmesh-"+name), nats.Timeout(m.timeout), nats.RetryOnFailedConnect(false))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w (is the mesh running? start it with 'utpmesh up', or pass --nats URL)", m.url, err)
	}
	return nc, nil
}

// writeJSON prints v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// agentClient returns an agent client on nc for the mesh's protocol
// version, logging warnings and errors only to w.
func (m *meshFlags) agentClient(nc *nats.Conn, project, channel, agentID string, w io.Writer) (*agent.Client, error) {
	c, err := agent.New(nc, agent.Config{Project: project, Channel: channel, AgentID: agentID, Version: m.version,
		Logger: slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return nil, usagef("%v", err)
	}
	return c, nil
}

// callerFlags are the identity flags of subcommands that make tool calls:
// the agent the calls are made as and the mandate that authorizes them.
// With the Cedar gate on (the default in 'utpmesh up') a call needs a
// mandate whose sub is the calling agent, so --agent defaults to the
// mandate's sub.
type callerFlags struct {
	agent    string
	mandate  string
	defAgent string
}

// register adds --agent and --mandate. defAgent is the agent used when
// neither --agent nor a mandate names one.
func (f *callerFlags) register(fs *flag.FlagSet, e env, defAgent string) {
	f.defAgent = defAgent
	def := ""
	if defAgent != "" {
		def = ", else " + defAgent
	}
	fs.StringVar(&f.agent, "agent", "", "agent id the calls are made as (default: the mandate's sub"+def+")")
	fs.StringVar(&f.mandate, "mandate", e.getenv("UTPMESH_MANDATE"),
		"signed mandate (compact JWS) authorizing the calls, or @FILE / a file name (default $UTPMESH_MANDATE; 'utpmesh up' writes a demo one to <data>/demo-mandate.jwt)")
}

// resolve reads an @FILE mandate and returns the agent id and the token.
func (f *callerFlags) resolve() (agentID, token string, err error) {
	token = strings.TrimSpace(f.mandate)
	path, isFile := strings.CutPrefix(token, "@")
	if !isFile && token != "" && strings.Count(token, ".") != 2 {
		// Not shaped like a compact JWS: a file name without the @.
		path, isFile = token, true
	}
	if isFile {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", "", usagef("--mandate %s: %v (pass the token itself, or @FILE)", f.mandate, err)
		}
		token = strings.TrimSpace(string(b))
	}
	agentID = f.agent
	if token != "" {
		m, err := mandate.Decode(token)
		if err != nil {
			return "", "", usagef("--mandate: %v", err)
		}
		if agentID == "" {
			agentID = m.Claims.Subject
		}
	}
	if agentID == "" {
		agentID = f.defAgent
	}
	return agentID, token, nil
}

// progress prints "label done/total" on one terminal line, rewritten in
// place; it prints nothing when w is not a terminal.
type progress struct {
	w     io.Writer
	label string
	on    bool
}

func newProgress(w io.Writer, label string) *progress {
	return &progress{w: w, label: label, on: isTerminal(w)}
}

// step shows done of total.
func (p *progress) step(done, total int) {
	if p.on {
		fmt.Fprintf(p.w, "\r\033[K%s %d/%d", p.label, done, total)
	}
}

// end clears the progress line.
func (p *progress) end() {
	if p.on {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// isTerminal reports whether w is a terminal (progress output goes only
// there, so piped output stays clean).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
