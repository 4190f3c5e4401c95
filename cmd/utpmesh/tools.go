package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/cli"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/registry/natsreg"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

func init() {
	register(spec{name: "tools", order: 30, summary: "the tool registry: ls, get NAME, import FILE.yaml|DIR, rm NAME",
		make: func(e env) command { return &toolsCommand{env: e} }})
}

type toolsCommand struct{ env env }

const toolsUsage = `Usage: utpmesh tools <ls|get|import|rm> [flags]

  ls                      list the project's tools (a table; --json for JSON)
  get NAME...             show tool definitions
  import FILE.yaml|DIR... register tools from CommonGround YAML files
                          (a directory: every *.yaml and *.yml in it)
  rm NAME...              remove tools from the registry

Run 'utpmesh tools <subcommand> --help' for the flags.
`

// projectFlags are --project and --channel.
type projectFlags struct {
	project string
	channel string
}

func (p *projectFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.project, "project", "demo", "project (tenant) to work in")
	fs.StringVar(&p.channel, "channel", agent.DefaultChannel, "channel of the request subjects")
}

func (c *toolsCommand) Run(ctx context.Context, args []string) error {
	return dispatch(ctx, c.env, "tools", toolsUsage, []sub{
		{[]string{"ls", "list"}, c.ls},
		{[]string{"get", "show"}, c.get},
		{[]string{"import"}, c.importYAML},
		{[]string{"rm", "delete"}, c.rm},
	}, args)
}

// registry connects and returns a registry client.
func (c *toolsCommand) registry(ctx context.Context, mf *meshFlags, pf *projectFlags) (*nats.Conn, *natsreg.Client, error) {
	if err := registry.CheckProjectID(pf.project); err != nil {
		return nil, nil, usagef("--project: %v", err)
	}
	nc, err := mf.connect(ctx, "tools")
	if err != nil {
		return nil, nil, err
	}
	reg, err := natsreg.NewClient(nc, svc.WithVersion(mf.version), svc.WithChannel(pf.channel), svc.WithTimeout(mf.timeout))
	if err != nil {
		nc.Close()
		return nil, nil, usagef("%v", err)
	}
	return nc, reg, nil
}

func (c *toolsCommand) ls(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("tools ls", "utpmesh tools ls [--project P] [--json]", c.env)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q ('tools ls' takes flags only; to show one tool: utpmesh tools get %s)", pos[0], pos[0])
	}
	nc, reg, err := c.registry(ctx, mf, pf)
	if err != nil {
		return err
	}
	defer nc.Close()
	entries, err := reg.List(ctx, pf.project)
	if err != nil {
		return fmt.Errorf("list the tools of project %s: %w", pf.project, err)
	}
	if mf.json {
		return writeJSON(c.env.stdout, entries)
	}
	if len(entries) == 0 {
		fmt.Fprintf(c.env.stdout, "project %s has no tools (register some with 'utpmesh tools import FILE.yaml')\n", pf.project)
		return nil
	}
	tw := tabwriter.NewWriter(c.env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tAFTER\tTIMEOUT\tTARGET SUBJECT\tDESCRIPTION")
	for _, e := range entries {
		timeout := "-"
		if d := e.Options.Timeout(); d > 0 {
			timeout = d.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.ToolName, e.AfterExecution, timeout, e.TargetSubject, cut(e.Description, 60))
	}
	return tw.Flush()
}

func (c *toolsCommand) get(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("tools get", "utpmesh tools get NAME... [--project P] [--json]", c.env)
	names, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return usagef("name the tool to show, e.g. 'utpmesh tools get echo' (list them with 'utpmesh tools ls')")
	}
	nc, reg, err := c.registry(ctx, mf, pf)
	if err != nil {
		return err
	}
	defer nc.Close()
	var found []*registry.Entry
	var missing []string
	for _, n := range names {
		e, err := reg.Get(ctx, pf.project, n)
		if errors.Is(err, registry.ErrNotFound) {
			missing = append(missing, n)
			continue
		}
		if err != nil {
			return fmt.Errorf("get tool %q: %w", n, err)
		}
		found = append(found, e)
	}
	if mf.json {
		if found == nil {
			found = []*registry.Entry{}
		}
		if err := writeJSON(c.env.stdout, found); err != nil {
			return err
		}
	} else {
		for i, e := range found {
			if i > 0 {
				fmt.Fprintln(c.env.stdout)
			}
			writeEntry(c.env, e)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("project %s has no tool %s (list them with 'utpmesh tools ls --project %s')", pf.project, strings.Join(quoteAll(missing), ", "), pf.project)
	}
	return nil
}

func writeEntry(e env, t *registry.Entry) {
	w := e.stdout
	fmt.Fprintf(w, "tool             %s\n", t.ToolName)
	fmt.Fprintf(w, "project          %s\n", t.ProjectID)
	fmt.Fprintf(w, "description      %s\n", t.Description)
	fmt.Fprintf(w, "target_subject   %s\n", t.TargetSubject)
	fmt.Fprintf(w, "after_execution  %s\n", t.AfterExecution)
	if !t.UpdatedAt.IsZero() {
		fmt.Fprintf(w, "updated_at       %s\n", t.UpdatedAt.Format("2006-01-02T15:04:05.000Z07:00"))
	}
	fmt.Fprintf(w, "parameters       ")
	_ = writeJSON(w, t.Parameters)
	fmt.Fprintf(w, "options          ")
	_ = writeJSON(w, t.Options)
}

func (c *toolsCommand) importYAML(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("tools import", "utpmesh tools import FILE.yaml|DIR... [--project P] [--dry-run]", c.env)
	dry := fs.Bool("dry-run", false, "parse and validate the files; register nothing")
	paths, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return usagef("name the YAML files or directories to import, e.g. 'utpmesh tools import tools/weather.yaml'")
	}
	if err := registry.CheckProjectID(pf.project); err != nil {
		return usagef("--project: %v", err)
	}
	files, err := yamlFiles(paths)
	if err != nil {
		return err
	}
	// Parse everything first: a typo in the tenth file registers nothing.
	type parsed struct {
		file    string
		entries []*registry.Entry
	}
	var all []parsed
	var bad []string
	seen := map[string]string{}
	total := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		entries, err := registry.ParseYAML(data, pf.project)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		for _, e := range entries {
			if prev, dup := seen[e.ToolName]; dup {
				bad = append(bad, fmt.Sprintf("%s: tool %q is also defined in %s", f, e.ToolName, prev))
			}
			seen[e.ToolName] = f
		}
		all = append(all, parsed{f, entries})
		total += len(entries)
	}
	if len(bad) > 0 {
		return fmt.Errorf("nothing imported; fix these files first:\n  %s", strings.Join(bad, "\n  "))
	}
	if *dry {
		for _, p := range all {
			for _, e := range p.entries {
				fmt.Fprintf(c.env.stdout, "valid  %s  (%s)\n", e.ToolName, p.file)
			}
		}
		fmt.Fprintf(c.env.stdout, "%d tools in %d files are valid; nothing registered (--dry-run)\n", total, len(files))
		return nil
	}
	nc, reg, err := c.registry(ctx, mf, pf)
	if err != nil {
		return err
	}
	defer nc.Close()
	pr := newProgress(c.env.stderr, "importing")
	done := 0
	for _, p := range all {
		for _, e := range p.entries {
			if _, err := reg.Put(ctx, e); err != nil {
				pr.end()
				return fmt.Errorf("register %q from %s (%d of %d tools registered before it): %w", e.ToolName, p.file, done, total, err)
			}
			done++
			pr.step(done, total)
		}
	}
	pr.end()
	for _, p := range all {
		for _, e := range p.entries {
			fmt.Fprintf(c.env.stdout, "registered  %s  (%s)\n", e.ToolName, p.file)
		}
	}
	fmt.Fprintf(c.env.stdout, "%d tools from %d files registered in project %s\n", total, len(files), pf.project)
	return nil
}

// yamlFiles expands directories into their *.yaml and *.yml files, sorted.
func yamlFiles(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, usagef("%v", err)
		}
		if !fi.IsDir() {
			out = append(out, p)
			continue
		}
		var inDir []string
		for _, pat := range []string{"*.yaml", "*.yml"} {
			m, _ := filepath.Glob(filepath.Join(p, pat))
			inDir = append(inDir, m...)
		}
		if len(inDir) == 0 {
			return nil, usagef("directory %s has no *.yaml or *.yml files", p)
		}
		sort.Strings(inDir)
		out = append(out, inDir...)
	}
	return out, nil
}

func (c *toolsCommand) rm(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("tools rm", "utpmesh tools rm NAME... [--project P]", c.env)
	names, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return usagef("name the tool to remove, e.g. 'utpmesh tools rm weather'")
	}
	nc, reg, err := c.registry(ctx, mf, pf)
	if err != nil {
		return err
	}
	defer nc.Close()
	var missing []string
	for _, n := range names {
		err := reg.Delete(ctx, pf.project, n)
		if errors.Is(err, registry.ErrNotFound) {
			missing = append(missing, n)
			continue
		}
		if err != nil {
			return fmt.Errorf("remove tool %q: %w", n, err)
		}
		fmt.Fprintf(c.env.stdout, "removed  %s\n", n)
	}
	if len(missing) > 0 {
		return fmt.Errorf("project %s has no tool %s; nothing to remove", pf.project, strings.Join(quoteAll(missing), ", "))
	}
	return nil
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = fmt.Sprintf("%q", x)
	}
	return out
}

// cut shortens s to n runes with "…" (cli.Cut, shared with the catalogues' verbs).
var cut = cli.Cut
