package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cedar-policy/cedar-go/types"
	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
	"github.com/utpmesh/utpmesh/pkg/registry/natsreg"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

func init() {
	register(spec{name: "policy", order: 40, summary: "manage a project's Cedar policies: put, get, history, rollback, test, config",
		make: func(e env) command { return &policyCommand{env: e} }})
}

type policyCommand struct{ env env }

const policyUsage = `utpmesh policy put    --project P FILE|- [--yes]
                                             validate FILE against the project's tools, show the diff
                                             against the stored set and replace it after you confirm
utpmesh policy get    --project P [--version N]
                                             print the stored policy set (or a kept version)
utpmesh policy history --project P           list the kept versions (the last 20)
utpmesh policy rollback --project P [VERSION] [--yes]
                                             restore a kept version (default: the one before the current)
utpmesh policy test   --project P --agent A (--tool T | --action 'NS::"id"') [--booking-state S] [--booking B] [--hem-id H] [--mandate FILE|TOKEN]
                                             evaluate one call against the stored policies (exit 1 on deny)
utpmesh policy config --project P [--mandate required|not_required] [--commands admitted|raw]
                                             print or set whether calls need a mandate`

func (c *policyCommand) Run(ctx context.Context, args []string) error {
	sub, args, err := splitSubcommand(args, policyUsage, "policy needs a subcommand: put, get, test or config", c.env)
	if err != nil {
		return err
	}
	fs, mf := newMeshFlagSet("policy "+sub, policyUsage, c.env)
	project := fs.String("project", "demo", "project whose policies to manage")
	agent := fs.String("agent", "", "test: the calling agent id")
	tool := fs.String("tool", "", "test: the tool name (its action and scopes come from the registry)")
	action := fs.String("action", "", `test: the Cedar action instead of --tool, e.g. 'ATPAction::"invoke_hem"'`)
	state := fs.String("booking-state", "", "test: the booking state (e.g. PRE_JOURNEY)")
	booking := fs.String("booking", "", "test: the call's booking_object_id argument")
	hem := fs.String("hem-id", "", "test: the call's hem_id argument")
	mand := fs.String("mandate", "", "test: the mandate (file or token); config: required or not_required")
	commands := fs.String("commands", "", "config: admitted (calls go through the mesh's admission, the default) or raw (agents may publish raw commands; logged)")
	yes := fs.Bool("yes", false, "put, rollback: replace without asking (for scripts)")
	version := fs.Uint64("version", 0, "get: print this kept version instead of the current one")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch sub {
	case "put", "get", "history", "rollback", "test", "config":
	default:
		msg := fmt.Sprintf("unknown policy subcommand %q; use put, get, history, rollback, test or config", sub)
		if s := closest(sub, []string{"put", "get", "history", "rollback", "test", "config"}); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", s)
		}
		return usagef("%s", msg)
	}
	if sub != "put" && sub != "rollback" && len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	var rollbackTo uint64
	if sub == "rollback" {
		if len(pos) > 1 {
			return usagef("policy rollback takes at most one VERSION, e.g. utpmesh policy rollback --project demo 3")
		}
		if len(pos) == 1 {
			v, err := strconv.ParseUint(pos[0], 10, 64)
			if err != nil || v == 0 {
				return usagef("VERSION %q is not a version number; utpmesh policy history --project %s lists them", pos[0], *project)
			}
			rollbackTo = v
		}
	}
	var text []byte
	if sub == "put" {
		if len(pos) != 1 {
			return usagef("policy put takes one FILE (or - for stdin), e.g. utpmesh policy put --project demo policies.cedar")
		}
		if pos[0] == "-" {
			text, err = io.ReadAll(policyStdin)
		} else {
			text, err = os.ReadFile(pos[0])
		}
		if err != nil {
			return fmt.Errorf("read policies: %w", err)
		}
		// Syntax and schema first, before any connection: the message
		// names the file, line and column.
		if _, err := authz.ParseAndValidate(policyName(pos[0]), string(text)); err != nil {
			return err
		}
	}
	if sub == "test" && *agent == "" {
		return usagef("policy test needs --agent, e.g. --agent demo-agent")
	}
	if sub == "test" && *tool == "" && *action == "" {
		return usagef(`policy test needs --tool NAME or --action 'NS::"id"'`)
	}
	nc, err := mf.connect(ctx, "policy")
	if err != nil {
		return err
	}
	defer nc.Close()
	cl, err := natsauthz.NewClient(nc, mf.version)
	if err != nil {
		return err
	}
	rctx := ctx // replace and rollback get their own timeout after the confirmation
	ctx, cancel := context.WithTimeout(ctx, mf.timeout)
	defer cancel()
	rep := &replacer{env: c.env, cl: cl, project: *project, yes: *yes, json: mf.json, stdinUsed: sub == "put" && pos[0] == "-"}
	switch sub {
	case "put":
		if err := rep.checkTools(ctx, nc, *mf, policyName(pos[0]), string(text)); err != nil {
			return err
		}
		cur, err := currentDoc(ctx, cl, *project)
		if err != nil {
			return err
		}
		return rep.replace(rctx, mf.timeout, cur, string(text), policyName(pos[0]), 0)
	case "rollback":
		return rep.rollback(ctx, rctx, *mf, nc, rollbackTo)
	case "history":
		vs, err := cl.History(ctx, *project)
		if err != nil {
			return err
		}
		if mf.json {
			return writeJSON(c.env.stdout, vs)
		}
		if len(vs) == 0 {
			fmt.Fprintf(c.env.stdout, "project %s has no policy set (utpmesh policy put --project %s FILE)\n", *project, *project)
			return nil
		}
		fmt.Fprintf(c.env.stdout, "%-8s %-20s %-12s %8s  %s\n", "VERSION", "UPDATED", "SHA256", "BYTES", "NOTE")
		for _, v := range vs {
			var note []string
			if v.Current {
				note = append(note, "current")
			}
			if v.RolledBackFrom != 0 {
				note = append(note, fmt.Sprintf("rollback to version %d", v.RolledBackFrom))
			}
			fmt.Fprintf(c.env.stdout, "%-8d %-20s %-12s %8d  %s\n", v.Version, v.UpdatedAt.Format("2006-01-02T15:04:05Z"), short(v.SHA256), v.Bytes, strings.Join(note, ", "))
		}
	case "get":
		var doc *authz.PolicyDoc
		if *version != 0 {
			doc, err = cl.PolicyVersion(ctx, *project, *version)
		} else {
			doc, err = cl.Policies(ctx, *project)
		}
		if err != nil {
			return err
		}
		if mf.json {
			return writeJSON(c.env.stdout, doc)
		}
		fmt.Fprintf(c.env.stdout, "// project %s, version %d, updated %s\n%s", doc.Project, doc.Version, doc.UpdatedAt.Format("2006-01-02T15:04:05Z"), doc.Policies)
		if !strings.HasSuffix(doc.Policies, "\n") {
			fmt.Fprintln(c.env.stdout)
		}
	case "config":
		if *mand != "" || *commands != "" {
			// The config is replaced whole: change only what was given.
			cur, err := cl.Config(ctx, *project)
			if err != nil {
				return err
			}
			if *mand != "" {
				cur.Mandate = authz.MandateMode(*mand)
			}
			if *commands != "" {
				cur.Commands = authz.CommandsMode(*commands)
			}
			if err := cl.PutConfig(ctx, *project, cur); err != nil {
				return err
			}
		}
		cfg, err := cl.Config(ctx, *project)
		if err != nil {
			return err
		}
		if mf.json {
			return writeJSON(c.env.stdout, cfg)
		}
		cm := cfg.Commands
		if cm == "" {
			cm = authz.CommandsAdmitted
		}
		fmt.Fprintf(c.env.stdout, "project %s: mandate %s, commands %s\n", *project, cfg.Mandate, cm)
		if cfg.RawCommands() {
			fmt.Fprintf(c.env.stdout, "warning: project %s accepts raw tool commands: workers without the gate run whatever agents publish (docs/protocol.md, Admission)\n", *project)
		}
	case "test":
		req := natsauthz.TestRequest{AgentID: *agent, ToolName: *tool, Action: *action, Arguments: map[string]any{}}
		for name, v := range map[string]string{"booking_object_id": *booking, "hem_id": *hem} {
			if v != "" {
				req.Arguments[name] = v
			}
		}
		if *state != "" {
			req.State = state
		}
		if *mand != "" {
			if req.Mandate, err = readToken(*mand); err != nil {
				return err
			}
		}
		d, err := cl.Test(ctx, *project, req)
		if err != nil {
			return err
		}
		if mf.json {
			if err := writeJSON(c.env.stdout, d); err != nil {
				return err
			}
		} else {
			verdict := "DENY"
			if d.Allowed {
				verdict = "ALLOW"
			}
			fmt.Fprintf(c.env.stdout, "%s %s (%s): %s\n", verdict, d.Action, d.Reason, d.Message)
			if len(d.Policies) > 0 {
				fmt.Fprintf(c.env.stdout, "  policies: %s\n", strings.Join(d.Policies, ", "))
			}
			for _, g := range d.Granted {
				fmt.Fprintf(c.env.stdout, "  mandate grants %s\n", g)
			}
			for _, e := range d.Errors {
				fmt.Fprintf(c.env.stdout, "  error: %s\n", e)
			}
		}
		if !d.Allowed {
			return errDenied
		}
	}
	return nil
}

// policyName is how messages name the policy text: the file's base name,
// or "stdin".
func policyName(arg string) string {
	if arg == "-" {
		return "stdin"
	}
	return filepath.Base(arg)
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	return sum
}

// currentDoc is the project's stored set, or an empty doc (version 0)
// when it has none.
func currentDoc(ctx context.Context, cl *natsauthz.Client, project string) (*authz.PolicyDoc, error) {
	doc, err := cl.Policies(ctx, project)
	if errors.Is(err, authz.ErrNotFound) {
		return &authz.PolicyDoc{Project: project}, nil
	}
	return doc, err
}

// policyStdin is where put reads "-" and the answer to "replace? [y/N]",
// and stdinIsTerminal says whether a person can answer; tests replace
// them.
var (
	policyStdin     io.Reader = os.Stdin
	stdinIsTerminal           = func() bool {
		fi, err := os.Stdin.Stat()
		return err == nil && fi.Mode()&os.ModeCharDevice != 0
	}
)

// replacer shows the diff of a replacement, asks for confirmation and
// stores the new set based on the version it showed.
type replacer struct {
	env       env
	cl        *natsauthz.Client
	project   string
	yes, json bool
	// stdinUsed: the policies came from stdin, so it cannot answer.
	stdinUsed bool
}

// checkTools validates text against the actions of the project's tools,
// as the policy service will, for a message before the diff.
func (r *replacer) checkTools(ctx context.Context, nc *nats.Conn, mf meshFlags, name, text string) error {
	reg, err := natsreg.NewClient(nc, svc.WithVersion(mf.version), svc.WithTimeout(mf.timeout))
	if err != nil {
		return err
	}
	actions, err := authz.RegistryActions{Registry: reg}.Actions(ctx, r.project)
	if err != nil {
		return nil // the policy service validates again and reports
	}
	if actions == nil {
		actions = []types.EntityUID{}
	}
	_, err = authz.ParseAndValidateFor(name, text, actions)
	return err
}

// replace shows the diff from cur to text and, once confirmed, stores text
// (or, with rollbackOf set, restores that version) based on cur.Version.
func (r *replacer) replace(ctx context.Context, timeout time.Duration, cur *authz.PolicyDoc, text, name string, rollbackOf uint64) error {
	out := r.env.stdout
	if r.json {
		out = r.env.stderr
	}
	if cur.Version > 0 && cur.Policies == text {
		if r.json {
			return writeJSON(r.env.stdout, cur)
		}
		fmt.Fprintf(out, "policies of %s unchanged (version %d, sha256 %s)\n", r.project, cur.Version, short(cur.SHA256))
		return nil
	}
	from := "no policy set stored"
	if cur.Version > 0 {
		from = fmt.Sprintf("stored version %d", cur.Version)
	}
	fmt.Fprintf(out, "--- %s of %s\n+++ %s\n", from, r.project, name)
	if d := authz.DiffPolicies(cur.Policies, text); d != "" {
		fmt.Fprint(out, d)
	} else {
		fmt.Fprintln(out, "(only white space at the end differs)")
	}
	if !r.yes {
		if r.stdinUsed || !stdinIsTerminal() {
			why := "stdin is not a terminal"
			if r.stdinUsed {
				why = "the policies were read from stdin"
			}
			return fmt.Errorf("not replaced: %s, so nobody can confirm; pass --yes to replace the policy set of %s without asking", why, r.project)
		}
		fmt.Fprintf(r.env.stderr, "replace the policy set of %s? [y/N] ", r.project)
		answer, _ := bufio.NewReader(policyStdin).ReadString('\n')
		switch strings.ToLower(strings.TrimSpace(answer)) {
		case "y", "yes":
		default:
			return fmt.Errorf("not replaced: the policy set of %s stays at version %d (answer y to replace)", r.project, cur.Version)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var doc *authz.PolicyDoc
	var err error
	if rollbackOf != 0 {
		doc, err = r.cl.Rollback(wctx, r.project, rollbackOf, cur.Version)
	} else {
		doc, err = r.cl.ReplacePolicies(wctx, r.project, text, cur.Version)
	}
	if errors.Is(err, authz.ErrConflict) {
		return fmt.Errorf("%w; nothing was replaced, run the command again to see the new diff", err)
	}
	if err != nil {
		return err
	}
	if r.json {
		return writeJSON(r.env.stdout, doc)
	}
	if rollbackOf != 0 {
		fmt.Fprintf(r.env.stdout, "rolled back policies of %s to version %d: now version %d, sha256 %s\n", doc.Project, rollbackOf, doc.Version, short(doc.SHA256))
		return nil
	}
	fmt.Fprintf(r.env.stdout, "stored policies of %s: version %d, sha256 %s\n", doc.Project, doc.Version, short(doc.SHA256))
	return nil
}

// rollback restores version to (0: the newest kept version before the
// current one) after the same validation, diff and confirmation as put.
func (r *replacer) rollback(ctx, rctx context.Context, mf meshFlags, nc *nats.Conn, to uint64) error {
	vs, err := r.cl.History(ctx, r.project)
	if err != nil {
		return err
	}
	var cur *authz.PolicyVersion
	for i := range vs {
		if vs[i].Current {
			cur = &vs[i]
		}
	}
	if cur == nil {
		return fmt.Errorf("%w: project %s has no policy set to roll back (utpmesh policy put --project %s FILE)", authz.ErrNotFound, r.project, r.project)
	}
	if to == 0 {
		for _, v := range vs {
			if v.Version < cur.Version {
				to = v.Version
				break
			}
		}
		if to == 0 {
			return fmt.Errorf("%w: project %s has only version %d; there is no previous version to roll back to", authz.ErrNotFound, r.project, cur.Version)
		}
	}
	old, err := r.cl.PolicyVersion(ctx, r.project, to)
	if err != nil {
		return err
	}
	curDoc, err := r.cl.Policies(ctx, r.project)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("version %d", to)
	if curDoc.Policies == old.Policies {
		fmt.Fprintf(r.env.stdout, "policies of %s unchanged: version %d has the same text as the current version %d\n", r.project, to, curDoc.Version)
		return nil
	}
	if err := r.checkTools(ctx, nc, mf, name, old.Policies); err != nil {
		return err
	}
	return r.replace(rctx, mf.timeout, curDoc, old.Policies, name, to)
}

// errDenied makes `policy test` exit 1 on a denial (the decision is printed).
var errDenied = errors.New("denied")

// readToken reads a mandate from a file, or takes s as the token itself.
func readToken(s string) (string, error) {
	if strings.Count(s, ".") == 2 && !strings.ContainsAny(s, "/\\") {
		if _, err := os.Stat(s); err != nil {
			return strings.TrimSpace(s), nil
		}
	}
	b, err := os.ReadFile(s)
	if err != nil {
		return "", fmt.Errorf("mandate: %q is neither a token nor a readable file: %w", s, err)
	}
	return strings.TrimSpace(string(b)), nil
}
