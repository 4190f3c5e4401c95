package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cedar-policy/cedar-go/types"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

func init() {
	register(spec{name: "mandate", order: 41, summary: "issue, inspect, narrow and query ATP mandates (signed Cedar authority)",
		make: func(e env) command { return &mandateCommand{env: e} }})
}

// setupAuth prepares authorization for `utpmesh up` (authz.SetupDemo) and
// returns the line up prints about it.
func setupAuth(ctx context.Context, m *mesh.Mesh) (string, error) {
	a := m.Auth()
	actions, operatorActions := demoActions(m.Runtime().Tools())
	cfg := m.Config()
	res, err := authz.SetupDemo(ctx, a.Store, a.Keys, cfg.Projects, actions, cfg.DataDir, time.Now(), operatorActions...)
	if err != nil {
		return "", err
	}
	line := "Cedar gate on (default deny; docs/security.md)"
	if res.MandatePath != "" {
		line += fmt.Sprintf("; demo mandate for agent %s: %s", authz.DemoAgent, res.MandatePath)
	}
	return line, nil
}

// demoActions are the Cedar actions of the served tools (built-ins
// aside): the agents' tools', which the demo mandate holds, and those of
// operator-only tools (registry options.principal operator) that no
// agent's tool shares, which the demo policy grants to operators only.
func demoActions(tools []*worker.Tool) (agents, operators []types.EntityUID) {
	agentSeen, opSeen := map[types.EntityUID]bool{}, map[types.EntityUID]bool{}
	for _, t := range tools {
		if t.Builtin {
			continue
		}
		act, err := authz.ActionOf(t.Entry(authz.DemoProject))
		if err != nil {
			continue
		}
		if t.Options.Principal == registry.PrincipalOperator {
			opSeen[act] = true
		} else if !agentSeen[act] {
			agentSeen[act] = true
			agents = append(agents, act)
		}
	}
	for _, t := range tools {
		if t.Builtin {
			continue
		}
		act, err := authz.ActionOf(t.Entry(authz.DemoProject))
		if err == nil && opSeen[act] && !agentSeen[act] {
			agentSeen[act] = true // once
			operators = append(operators, act)
		}
	}
	return agents, operators
}

type mandateCommand struct{ env env }

const mandateUsage = `utpmesh mandate issue   --project P --agent A --policy FILE [--ttl 1h] [--booking B] [--agent-pub KEY] [--data DIR | --key FILE]
utpmesh mandate inspect TOKEN|FILE [--project P --data DIR | --key FILE]   decode, and verify with the issuer key of DIR (default ./utpmesh-data) or FILE
utpmesh mandate narrow  --parent TOKEN|FILE --policy FILE [--agent A] [--ttl D] [--data DIR | --key FILE]
utpmesh mandate query   --mandate TOKEN|FILE [--project P] [--booking-state S]   the Windley Loop query (needs a running mesh)`

func (c *mandateCommand) Run(ctx context.Context, args []string) error {
	sub, args, err := splitSubcommand(args, mandateUsage, "mandate needs a subcommand: issue, inspect, narrow or query", c.env)
	if err != nil {
		return err
	}
	fs, mf := newMeshFlagSet("mandate "+sub, mandateUsage, c.env)
	project := fs.String("project", "demo", "project whose issuer signs (issue, narrow) or that is queried")
	agent := fs.String("agent", "", "the agent id the mandate is for (sub)")
	policy := fs.String("policy", "", "file holding the mandate's Cedar policies")
	ttl := fs.Duration("ttl", time.Hour, "issue: validity; narrow: default the parent's expiry")
	booking := fs.String("booking", "", "bind the mandate to this booking_object_id")
	agentPub := fs.String("agent-pub", "", "the agent's Ed25519 public key, base64url (optional)")
	data := fs.String("data", "./utpmesh-data", "the mesh's data directory (issuer keys under DIR/keys)")
	keyFile := fs.String("key", "", "issuer key file (PKCS#8 PEM) instead of DIR/keys/PROJECT.pem")
	parent := fs.String("parent", "", "narrow: the parent mandate (token or file)")
	mandFlag := fs.String("mandate", "", "query: the mandate (token or file)")
	state := fs.String("booking-state", "", "query: the current booking state (omit when unknown)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	loadKey := func() (*mandate.IssuerKey, error) {
		if *keyFile != "" {
			b, err := os.ReadFile(*keyFile)
			if err != nil {
				return nil, fmt.Errorf("read key: %w", err)
			}
			return mandate.ParseKeyPEM(*project, b)
		}
		return mandate.NewKeyDir(filepath.Join(*data, "keys")).Load(ctx, *project)
	}
	readPolicy := func() (string, error) {
		if *policy == "" {
			return "", usagef("--policy FILE is required (the mandate's Cedar policies)")
		}
		b, err := os.ReadFile(*policy)
		if err != nil {
			return "", fmt.Errorf("read policy: %w", err)
		}
		if _, err := authz.ParseAndValidate(filepath.Base(*policy), string(b)); err != nil {
			return "", err
		}
		return string(b), nil
	}
	switch sub {
	case "issue", "narrow", "query":
		if len(pos) > 0 {
			return usagef("unexpected argument %q", pos[0])
		}
	case "inspect":
	default:
		return usagef("unknown mandate subcommand %q; use issue, inspect, narrow or query", sub)
	}
	now := time.Now()
	switch sub {
	case "issue":
		if *agent == "" {
			return usagef("mandate issue needs --agent, the agent id the mandate is for")
		}
		if *ttl <= 0 {
			return usagef("--ttl must be positive, e.g. --ttl 1h")
		}
		text, err := readPolicy()
		if err != nil {
			return err
		}
		key, err := loadKey()
		if err != nil {
			return err
		}
		cl := mandate.Claims{Subject: *agent, ExpiresAt: now.Add(*ttl).Unix(), AgentPub: *agentPub, Mandate: mandate.Grant{PolicySet: text}}
		if *booking != "" {
			cl.Resource = booking
		}
		tok, err := mandate.Issue(key, cl, now)
		if err != nil {
			return err
		}
		fmt.Fprintln(c.env.stdout, tok)
	case "narrow":
		if *parent == "" {
			return usagef("mandate narrow needs --parent TOKEN|FILE")
		}
		ptok, err := readToken(*parent)
		if err != nil {
			return err
		}
		text, err := readPolicy()
		if err != nil {
			return err
		}
		key, err := loadKey()
		if err != nil {
			return err
		}
		v := &mandate.Verifier{Keys: mandate.StaticKeys{key}}
		pm, err := v.Verify(ctx, ptok, key.Issuer)
		if err != nil {
			return fmt.Errorf("parent: %w", err)
		}
		cl := mandate.Claims{Subject: *agent, AgentPub: *agentPub, Mandate: mandate.Grant{PolicySet: text}}
		if cl.Subject == "" {
			cl.Subject = pm.Claims.Subject
		}
		if flagSet(fs, "ttl") {
			cl.ExpiresAt = now.Add(*ttl).Unix()
		}
		if *booking != "" {
			cl.Resource = booking
		}
		tok, err := mandate.Narrow(key, pm, cl, now)
		if err != nil {
			return err
		}
		fmt.Fprintln(c.env.stdout, tok)
	case "inspect":
		if len(pos) != 1 {
			return usagef("mandate inspect takes one TOKEN or FILE")
		}
		tok, err := readToken(pos[0])
		if err != nil {
			return err
		}
		m, err := mandate.Decode(tok)
		if err != nil {
			return err
		}
		verified, err := c.verifyInspected(ctx, fs, m, *data, *keyFile, project, loadKey)
		if err != nil {
			return err
		}
		out := map[string]any{"header": m.Header, "claims": m.Claims, "verified": verified, "grants": authz.Grants(m.Policies)}
		if mf.json {
			return writeJSON(c.env.stdout, out)
		}
		cb, _ := json.MarshalIndent(m.Claims, "", "  ")
		fmt.Fprintf(c.env.stdout, "header   alg=%s typ=%s kid=%s\nverified %s\nexpires  %s\ngrants\n", m.Header.Alg, m.Header.Typ, m.Header.Kid, verified, m.Expires().Format(time.RFC3339))
		for _, g := range authz.Grants(m.Policies) {
			fmt.Fprintf(c.env.stdout, "  %s\n", g)
		}
		fmt.Fprintf(c.env.stdout, "claims\n%s\n", cb)
		if strings.HasPrefix(verified, "INVALID") {
			return fmt.Errorf("mandate does not verify")
		}
	case "query":
		if *mandFlag == "" {
			return usagef("mandate query needs --mandate TOKEN|FILE (e.g. --mandate utpmesh-data/demo-mandate.jwt)")
		}
		tok, err := readToken(*mandFlag)
		if err != nil {
			return err
		}
		nc, err := mf.connect(ctx, "mandate")
		if err != nil {
			return err
		}
		defer nc.Close()
		cl, err := natsauthz.NewClient(nc, mf.version)
		if err != nil {
			return err
		}
		qctx, cancel := context.WithTimeout(ctx, mf.timeout)
		defer cancel()
		req := natsauthz.QueryRequest{AgentID: *agent, Mandate: tok}
		if *state != "" {
			req.State = state
		}
		r, err := cl.Query(qctx, *project, req)
		if err != nil {
			return err
		}
		if mf.json {
			return writeJSON(c.env.stdout, r)
		}
		fmt.Fprint(c.env.stdout, r.ContextBlock)
	}
	return nil
}

// verifyInspected says whether an inspected mandate verifies. With --key
// or an explicit --data it verifies (a missing key is an error). With the
// default --data it verifies when that directory has the issuer's key, and
// otherwise says which directory it looked in and what verification needs.
func (c *mandateCommand) verifyInspected(ctx context.Context, fs *flag.FlagSet, m *mandate.Mandate, data, keyFile string, project *string,
	loadKey func() (*mandate.IssuerKey, error)) (string, error) {
	if p, ok := mandate.ProjectOfIssuer(m.Claims.Issuer); ok && !flagSet(fs, "project") {
		*project = p
	}
	explicit := flagSet(fs, "data") || keyFile != ""
	if !explicit {
		keys := filepath.Join(data, "keys")
		if _, err := os.Stat(data); err != nil {
			return fmt.Sprintf("not verified: no data directory %s here (verification needs the issuer key of the mesh that issued it, DIR/keys/%s.pem: pass --data DIR or --key FILE, or check it against the running mesh: utpmesh mandate query --mandate FILE)", data, *project), nil
		}
		if _, err := os.Stat(mandate.NewKeyDir(keys).Path(*project)); err != nil {
			return fmt.Sprintf("not verified: %s has no issuer key for project %s (looked for %s; pass --data DIR of the mesh that issued it, or --key FILE)", data, *project, mandate.NewKeyDir(keys).Path(*project)), nil
		}
	}
	key, err := loadKey()
	if err != nil {
		return "", err
	}
	v := &mandate.Verifier{Keys: mandate.StaticKeys{key}}
	where := "key " + keyFile
	if keyFile == "" {
		where = "issuer key in " + filepath.Join(data, "keys")
	}
	if err := v.VerifyDecoded(ctx, m, key.Issuer); err != nil {
		return "INVALID: " + err.Error(), nil
	}
	return "valid (signature and time window; " + where + ")", nil
}

func flagSet(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			found = true
		}
	})
	return found
}
