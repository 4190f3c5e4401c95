package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
)

func init() {
	register(spec{name: "policy", order: 40, summary: "manage a project's Cedar policies: put, get, test, config",
		make: func(e env) command { return &policyCommand{env: e} }})
}

type policyCommand struct{ env env }

const policyUsage = `utpmesh policy put    --project P FILE|-     validate and store the project's Cedar policy set
utpmesh policy get    --project P            print the stored policy set
utpmesh policy test   --project P --agent A (--tool T | --action 'NS::"id"') [--booking-state S] [--booking B] [--hem-id H] [--mandate FILE|TOKEN]
                                             evaluate one call against the stored policies (exit 1 on deny)
utpmesh policy config --project P [--mandate required|not_required]
                                             print or set whether calls need a mandate`

func (c *policyCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(c.env.stdout, "Usage:\n"+policyUsage)
		if len(args) == 0 {
			return usagef("policy needs a subcommand: put, get, test or config")
		}
		return nil
	}
	sub, args := args[0], args[1:]
	var mf meshFlags
	fs := newFlagSet("policy "+sub, policyUsage, c.env)
	mf.register(fs, c.env)
	project := fs.String("project", "demo", "project whose policies to manage")
	agent := fs.String("agent", "", "test: the calling agent id")
	tool := fs.String("tool", "", "test: the tool name (its action and scopes come from the registry)")
	action := fs.String("action", "", `test: the Cedar action instead of --tool, e.g. 'ATPAction::"invoke_hem"'`)
	state := fs.String("booking-state", "", "test: the booking state (e.g. PRE_JOURNEY)")
	booking := fs.String("booking", "", "test: the call's booking_object_id argument")
	hem := fs.String("hem-id", "", "test: the call's hem_id argument")
	mand := fs.String("mandate", "", "test: the mandate (file or token); config: required or not_required")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch sub {
	case "put", "get", "test", "config":
	default:
		return usagef("unknown policy subcommand %q; use put, get, test or config", sub)
	}
	if sub != "put" && len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	var text []byte
	if sub == "put" {
		if len(pos) != 1 {
			return usagef("policy put takes one FILE (or - for stdin), e.g. utpmesh policy put --project demo policies.cedar")
		}
		if pos[0] == "-" {
			text, err = io.ReadAll(os.Stdin)
		} else {
			text, err = os.ReadFile(pos[0])
		}
		if err != nil {
			return fmt.Errorf("read policies: %w", err)
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
	ctx, cancel := context.WithTimeout(ctx, mf.timeout)
	defer cancel()
	switch sub {
	case "put":
		doc, err := cl.PutPolicies(ctx, *project, string(text))
		if err != nil {
			return err
		}
		if mf.json {
			return writeJSON(c.env.stdout, doc)
		}
		fmt.Fprintf(c.env.stdout, "stored policies of %s: version %d, sha256 %s\n", doc.Project, doc.Version, doc.SHA256[:12])
	case "get":
		doc, err := cl.Policies(ctx, *project)
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
		if *mand != "" {
			if err := cl.PutConfig(ctx, *project, authz.ProjectConfig{Mandate: authz.MandateMode(*mand)}); err != nil {
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
		fmt.Fprintf(c.env.stdout, "project %s: mandate %s\n", *project, cfg.Mandate)
	case "test":
		req := natsauthz.TestRequest{AgentID: *agent, ToolName: *tool, Action: *action, BookingObjectID: *booking, HEMID: *hem}
		if *state != "" {
			req.BookingState = state
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
