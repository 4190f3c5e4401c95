package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/creds"
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
	creds   string
	tlsCA   string
	// project points at the command's --project (nil for commands
	// without one): the credentials hint names its agent identity.
	project *string
}

// defaultCredsPath is the admin identity a local 'utpmesh up' writes with
// its default --data directory; the CLI uses it when no --creds is given.
const defaultCredsPath = defaultCredsDir + "/admin.nk"

// register adds --nats, --protocol, --timeout and --json to fs.
func (m *meshFlags) register(fs *flag.FlagSet, e env) {
	fs.StringVar(&m.url, "nats", natsURL(e), "NATS server URL (default $NATS_URL or nats://127.0.0.1:4222)")
	fs.StringVar(&m.version, "protocol", subjects.DefaultVersion, "UTP protocol version token of the mesh's subjects")
	fs.DurationVar(&m.timeout, "timeout", 10*time.Second, "how long one request to the mesh may take")
	fs.BoolVar(&m.json, "json", false, "print JSON instead of a table")
	fs.StringVar(&m.tlsCA, "tls-ca", e.getenv("NATS_CA"), "CA certificate (PEM) that signed the mesh's --tls-cert (default $NATS_CA)")
	fs.StringVar(&m.creds, "creds", e.getenv("NATS_CREDS"), "NATS credentials file: an nkey seed from DATA/creds or a .creds file (default $NATS_CREDS, else "+defaultCredsPath+" if it exists: the admin identity of a local 'utpmesh up')")
}

// agentCommands are the commands that act as an agent of a project (they
// make tool calls or read its turns): their identity is the project's
// agent identity, not the admin's. ('utpmesh ui' is not one: its live
// updates subscribe to every command subject, which only the admin may.)
var agentCommands = map[string]bool{"call": true, "confirm": true, "cancel": true, "undo": true, "turns": true, "receipts": true, "mcp": true}

// credsHint names the identity a command connects as, for the error of a
// connection the mesh refused: the project's agent identity for
// agentCommands, the operator's for an MCP bridge's operator, the admin's
// or the operator's for the rest. project is "" when the command has none.
func credsHint(name, project string) string {
	switch {
	case agentCommands[name]:
		if project == "" {
			project = "<project>"
		}
		return "DATA/creds/" + creds.AgentName(project) + ".nk (the agent identity of project " + project + "; ./utpmesh-data/creds/ beside a local up)"
	case name == "mcp-operator":
		return "DATA/creds/operator.nk (the operator identity)"
	}
	return "DATA/creds/admin.nk (admin work) or DATA/creds/operator.nk (an operator's)"
}

// projectName is the command's --project, "" when it has none.
func (m *meshFlags) projectName() string {
	if m.project == nil {
		return ""
	}
	return *m.project
}

// connect dials NATS. The error says how to start a mesh when none answers.
func (m *meshFlags) connect(ctx context.Context, name string) (*nats.Conn, error) {
	if err := subjects.ValidateToken("version", m.version); err != nil {
		return nil, usagef("--protocol: %v", err)
	}
	if m.timeout <= 0 {
		return nil, usagef("--timeout must be positive, e.g. --timeout 10s")
	}
	opts := []nats.Option{nats.Name("utpmesh-" + name), nats.Timeout(m.timeout), nats.RetryOnFailedConnect(false)}
	if m.tlsCA != "" {
		opts = append(opts, nats.RootCAs(m.tlsCA))
	}
	credsFile, implicit := m.creds, false
	if credsFile == "" {
		if _, err := os.Stat(defaultCredsPath); err == nil {
			credsFile, implicit = defaultCredsPath, true
		}
	}
	if credsFile != "" {
		opt, err := creds.Option(credsFile)
		if err != nil {
			return nil, usagef("--creds: %v", err)
		}
		opts = append(opts, opt)
	}
	nc, err := nats.Connect(m.url, opts...)
	if implicit && errors.Is(err, nats.ErrNkeysNotSupported) {
		// The local mesh runs --insecure: the default credentials are
		// left over from an earlier run.
		nc, err = nats.Connect(m.url, opts[:len(opts)-1]...) // all but the credentials
	}
	if errors.Is(err, nats.ErrAuthorization) {
		if credsFile != "" {
			return nil, fmt.Errorf("connect to NATS at %s: %w (the mesh refused the credentials %s: pass %s of this mesh's 'utpmesh up')", m.url, err, credsFile, credsHint(name, m.projectName()))
		}
		return nil, fmt.Errorf("connect to NATS at %s: %w (the mesh requires credentials: pass --creds FILE or set $NATS_CREDS, e.g. %s of 'utpmesh up')", m.url, err, credsHint(name, m.projectName()))
	}
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
	env      env
	// source says where the token came from once resolved: "" (none),
	// a file path, or "--mandate" / "$UTPMESH_MANDATE" for a literal token.
	source string
	// noDemo turns the demo-mandate default off: turns replay keeps each
	// recorded call's own mandate unless one is given explicitly.
	noDemo bool
}

// demoMandatePath is the demo mandate a local 'utpmesh up' writes with its
// default --data directory. Calls use it when no mandate is given.
const demoMandatePath = "./utpmesh-data/demo-mandate.jwt"

// register adds --agent and --mandate. defAgent is the agent used when
// neither --agent nor a mandate names one.
func (f *callerFlags) register(fs *flag.FlagSet, e env, defAgent string) {
	f.defAgent, f.env = defAgent, e
	def := ""
	if defAgent != "" {
		def = ", else " + defAgent
	}
	fs.StringVar(&f.agent, "agent", "", "agent id the calls are made as (default: the mandate's sub"+def+")")
	fs.StringVar(&f.mandate, "mandate", e.getenv("UTPMESH_MANDATE"),
		"signed mandate authorizing the calls: a file holding it (FILE or @FILE) or the token itself (default $UTPMESH_MANDATE, else "+demoMandatePath+" if it exists: the demo mandate of a local 'utpmesh up')")
}

// resolve reads the mandate and returns the agent id and the token. With
// no --mandate and no $UTPMESH_MANDATE it uses demoMandatePath when that
// file exists, and says so once on stderr.
func (f *callerFlags) resolve() (agentID, token string, err error) {
	v := strings.TrimSpace(f.mandate)
	switch {
	case v != "":
		token, f.source, err = readMandate(v)
		if err != nil {
			return "", "", err
		}
	case f.noDemo:
	default:
		b, rerr := os.ReadFile(demoMandatePath)
		if rerr == nil && len(bytes.TrimSpace(b)) > 0 {
			token, f.source = strings.TrimSpace(string(b)), demoMandatePath
			if f.env.stderr != nil {
				fmt.Fprintf(f.env.stderr, "using the demo mandate %s (pass --mandate to use another)\n", demoMandatePath)
			}
		}
	}
	agentID = f.agent
	if token != "" {
		m, err := mandate.Decode(token)
		if err != nil {
			return "", "", usagef("--mandate %s: %v (pass a mandate file, e.g. --mandate %s, or the token itself)", cut(f.describe(), 80), err, demoMandatePath)
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

// describe names the resolved mandate for messages.
func (f *callerFlags) describe() string {
	if f.source == "" || f.source == "--mandate" {
		return strings.TrimSpace(f.mandate)
	}
	return f.source
}

// readMandate interprets a --mandate value: @FILE is a file; a value that
// names an existing file is read; else a value shaped like a compact JWS
// is the token itself; anything else is a usage error saying what to pass.
// source is the file read, or "--mandate" for a literal token.
func readMandate(v string) (token, source string, err error) {
	if path, ok := strings.CutPrefix(v, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", "", usagef("--mandate %s: %v (pass an existing file as FILE or @FILE, or the token itself)", v, err)
		}
		return strings.TrimSpace(string(b)), path, nil
	}
	fi, serr := os.Stat(v)
	if serr == nil && fi.IsDir() {
		return "", "", usagef("--mandate %s is a directory; pass the mandate file in it, e.g. --mandate %s", v, demoMandatePath)
	}
	if serr == nil {
		b, err := os.ReadFile(v)
		if err != nil {
			return "", "", usagef("--mandate %s: %v", v, err)
		}
		return strings.TrimSpace(string(b)), v, nil
	}
	if looksLikeJWS(v) {
		return v, "--mandate", nil
	}
	return "", "", usagef("--mandate %s: no such file, and not a mandate token (a compact JWS: three base64url parts joined by dots); pass an existing file as FILE or @FILE, e.g. --mandate %s, or the token itself", cut(v, 80), demoMandatePath)
}

// looksLikeJWS reports whether v has the shape of a compact JWS: three
// non-empty base64url segments separated by dots.
func looksLikeJWS(v string) bool {
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if p == "" {
			return false
		}
		for _, r := range p {
			if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// authHint says what to type after a call ended auth_failed: which mandate
// was used (if any) and the command that gets a call through. e is the
// result's error; project is the call's project.
func (f *callerFlags) authHint(e *card.Error, project string) string {
	var d authz.AuthFailedDetail
	if e != nil && len(e.Detail) > 0 {
		_ = json.Unmarshal(e.Detail, &d)
	}
	issue := fmt.Sprintf("or issue one: utpmesh mandate issue --project %s --agent AGENT --policy FILE.cedar --data DIR (DIR is the mesh's --data, e.g. ./utpmesh-data)", project)
	pass := fmt.Sprintf("pass --mandate %s", demoMandatePath)
	if f.source == "" {
		if _, err := os.Stat(demoMandatePath); err != nil {
			pass = "pass --mandate FILE (a local 'utpmesh up' writes one to <its --data dir>/demo-mandate.jwt)"
		}
	}
	used := "no mandate was given"
	if f.source != "" {
		used = "the mandate used was " + f.describe()
		if f.source == "--mandate" {
			used = "the mandate used was the --mandate token"
		}
	}
	switch d.Reason {
	case authz.ReasonMandateMissing:
		return fmt.Sprintf("project %s requires a mandate and %s: %s, %s", project, used, pass, issue)
	case authz.ReasonSubjectMismatch:
		agent := f.agent
		if agent == "" {
			agent = "AGENT"
		}
		return fmt.Sprintf("%s (%s): drop --agent so the call is made as the mandate's agent, or pass a mandate for that agent: utpmesh mandate issue --project %s --agent %s --policy FILE.cedar --data DIR", e.Message, used, project, agent)
	case authz.ReasonMandateInvalid:
		return fmt.Sprintf("%s (%s): pass a current mandate of this mesh (an up restarted with another --data has other keys), e.g. %s, %s", e.Message, used, pass, issue)
	case authz.ReasonScopeViolation:
		return fmt.Sprintf("%s (%s): see what it permits with 'utpmesh mandate query --project %s --mandate %s', and pass one that permits %s: %s", e.Message, used, project, f.describeOr("FILE"), d.Tool, issue)
	case authz.ReasonOperatorOnly:
		return fmt.Sprintf("%s: an operator runs it, with the operator's credentials (e.g. 'utpmesh hem' with --creds %s)", e.Message, defaultOperatorCredsPath)
	case authz.ReasonNoProjectPolicy, authz.ReasonProjectPolicy:
		return fmt.Sprintf("%s: see the policies with 'utpmesh policy get --project %s' and change them with 'utpmesh policy put --project %s FILE.cedar'", e.Message, project, project)
	}
	msg := "the call was refused"
	if e != nil {
		msg = e.Message
	}
	return fmt.Sprintf("%s (%s): %s, %s", msg, used, pass, issue)
}

func (f *callerFlags) describeOr(def string) string {
	if f.source == "" || f.source == "--mandate" {
		return def
	}
	return f.source
}

// resultErr is the error of a call that did not succeed: status, code and
// message, and for auth_failed what to type instead. what names the call
// ("call", "confirm cfm_…").
func (f *callerFlags) resultErr(what string, res *card.ToolResultContent, project string) error {
	if res.Error != nil && res.Error.Code == card.CodeAuthFailed {
		return fmt.Errorf("%s %s: auth_failed: %s", what, res.Status, f.authHint(res.Error, project))
	}
	code, msg := card.ErrorCode("unknown"), "the result has no error"
	if res.Error != nil {
		code, msg = res.Error.Code, res.Error.Message
	}
	return fmt.Errorf("%s %s: %s: %s", what, res.Status, code, msg)
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
