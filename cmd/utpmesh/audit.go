package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/services/cynode/audit"
)

func init() {
	register(spec{name: "audit", order: 65, summary: "list the CyNodeAI gateway's audit records (audit ls --tool --task --since)",
		make: func(e env) command { return &auditCommand{env: e} }})
}

type auditCommand struct{ env env }

const auditUsage = "utpmesh audit ls [--project P] [--tool NAME] [--task ID] [--since 1h|2024-01-15T10:00:00Z] [--limit N] [--json] [--nats URL]"

// parseSince reads --since: a duration back from now, or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, usagef("--since %s: give a positive duration (e.g. --since 1h) or a time (--since 2024-01-15T10:00:00Z)", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usagef("--since %q is neither a duration (1h, 30m) nor an RFC 3339 time (2024-01-15T10:00:00Z)", s)
	}
	return t, nil
}

func (c *auditCommand) Run(ctx context.Context, args []string) error {
	fs, mf := newMeshFlagSet("audit", auditUsage, c.env)
	project := fs.String("project", "demo", "project whose records to list")
	tool := fs.String("tool", "", "only records of this tool (e.g. artifact.put)")
	task := fs.String("task", "", "only records of this task_id")
	since := fs.String("since", "", "only records from this long ago (1h) or since this time (RFC 3339)")
	limit := fs.Int("limit", 1000, "at most this many records (the newest)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "ls" {
		return usagef("want '%s'", auditUsage)
	}
	from, err := parseSince(*since, time.Now())
	if err != nil {
		return err
	}
	if *limit <= 0 {
		return usagef("--limit must be positive, e.g. --limit 100")
	}
	nc, err := mf.connect(ctx, "audit")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	lctx, cancel := context.WithTimeout(ctx, mf.timeout)
	defer cancel()
	recs, err := audit.List(lctx, js, mf.version, audit.Filter{Project: *project, Tool: *tool, TaskID: *task, Since: from, Limit: *limit})
	if err != nil {
		return err
	}
	if recs == nil {
		recs = []audit.Record{}
	}
	if mf.json {
		return writeJSON(c.env.stdout, recs)
	}
	w := c.env.stdout
	if len(recs) == 0 {
		fmt.Fprintf(w, "no audit records in project %s match (the cynode service records every call it receives; the event stream keeps them 7 days)\n", *project)
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tTOOL\tSUBJECT\tTYPE\tUSER\tTASK\tDECISION\tSTATUS\tERROR\tMS\tTOOL_CALL_ID")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.Time.Format(time.RFC3339), r.Tool, r.Subject, dash(r.AgentType), dash(r.UserID),
			dash(r.TaskID), r.Decision, r.Status, dash(r.ErrorType), r.DurationMS, r.ToolCallID)
	}
	return tw.Flush()
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
