package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox/natsinbox"
	"github.com/utpmesh/utpmesh/pkg/retention"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

const turnsGCSynopsis = `utpmesh turns gc [--project P] [--dry-run] [--max-age D] [--max-bytes N] [--archive DIR] [--json]

Applies the project's retention policy now ('utpmesh turns retention'), or
the limits given with --max-age and --max-bytes: every turn past them is
appended to DIR/<project>/<day>.jsonl and deleted from the CardStore and
the inbox, except a turn with a call that has no result or a result its
agent has not consumed (listed as kept, with why). --dry-run lists what
would go and changes nothing. Deleting needs the admin identity.`

func (c *turnsCommand) gc(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("turns gc", turnsGCSynopsis, c.env)
	dry := fs.Bool("dry-run", false, "list what would be deleted; change nothing")
	maxAge := fs.Duration("max-age", 0, "use this age limit instead of the project's policy, e.g. 720h")
	maxBytes := fs.String("max-bytes", "", "use this size limit instead of the project's policy, e.g. 500MB")
	archive := fs.String("archive", filepath.Join("utpmesh-data", "archive"), "directory the deleted turns are archived to")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("'turns gc' takes no arguments, got %v", pos)
	}
	if err := card.ValidateName("project_id", pf.project); err != nil {
		return usagef("--project: %v", err)
	}
	pol := retention.Policy{MaxAge: *maxAge}
	if *maxBytes != "" {
		if pol.MaxBytes, err = parseSize(*maxBytes); err != nil {
			return usagef("--max-bytes: %v", err)
		}
	}
	if err := pol.Check(); err != nil {
		return usagef("%v", err)
	}
	nc, store, err := openStore(ctx, mf, pf, "turns")
	if err != nil {
		return err
	}
	defer nc.Close()
	if pol.Zero() {
		cl, err := natsauthz.NewClient(nc, mf.version)
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, mf.timeout)
		src := retention.FromConfigs{Configs: cl}
		p, found, err := src.Policy(rctx, pf.project)
		cancel()
		if err != nil {
			return fmt.Errorf("read the retention policy of project %s: %w", pf.project, err)
		}
		if !found {
			return usagef("project %s has no retention policy: set one with 'utpmesh turns retention --project %s --max-age 720h', or pass --max-age or --max-bytes", pf.project, pf.project)
		}
		pol = p
	}
	ic, err := natsinbox.NewClient(nc, svc.WithVersion(mf.version), svc.WithChannel(pf.channel), svc.WithTimeout(mf.timeout))
	if err != nil {
		return usagef("%v", err)
	}
	sw, err := retention.New(retention.Config{Store: store, Inbox: ic, Archive: &retention.FileArchive{Dir: *archive},
		Holder: "cli-gc-" + card.NewID(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	rep, err := sw.Sweep(ctx, pf.project, pol, *dry)
	if err != nil {
		return err
	}
	if mf.json {
		return writeJSON(c.env.stdout, rep)
	}
	w := c.env.stdout
	switch {
	case rep.Skipped:
		fmt.Fprintf(w, "project %s is being swept by the mesh right now; nothing done (try again in a minute)\n", pf.project)
		return nil
	case *dry:
		fmt.Fprintf(w, "dry run: project %s, %s: %d of %d turns past the limits; %d would be deleted (%d cards, %d bytes)\n",
			pf.project, pol, rep.Over, rep.Turns, len(rep.Deleted), rep.Cards, rep.Bytes)
	default:
		fmt.Fprintf(w, "project %s, %s: %d of %d turns past the limits; %d deleted (%d cards, %d inbox entries, %d bytes), archived under %s\n",
			pf.project, pol, rep.Over, rep.Turns, len(rep.Deleted), rep.Cards, rep.Entries, rep.Bytes, *archive)
	}
	if len(rep.Deleted) > 0 {
		fmt.Fprintf(w, "  %s: %s\n", map[bool]string{true: "would delete", false: "deleted"}[*dry], strings.Join(rep.Deleted, " "))
	}
	for _, k := range rep.Kept {
		fmt.Fprintf(w, "  kept %s: %s\n", k.AgentTurnID, k.Reason)
	}
	return nil
}
