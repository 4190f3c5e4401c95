package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/retention"
)

const turnsRetentionSynopsis = `utpmesh turns retention [--project P] [--max-age D] [--max-bytes N] [--off] [--json]

Prints or sets the project's retention policy for turns, kept in the
project's configuration (admin only). The mesh's sweeper applies it every
10 minutes: a turn whose last card is older than --max-age, or beyond the
newest turns whose cards fit in --max-bytes, is archived under DATA/archive
and deleted, unless a call of it has no result or a result its agent has
not consumed. --max-age takes a duration of at least 1m (720h: 30 days;
0: no age limit); --max-bytes a size (500MB, 2GiB, 0: no size limit).
--off removes the policy. A flag not given keeps its current value.`

func (c *turnsCommand) retention(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("turns retention", turnsRetentionSynopsis, c.env)
	maxAge := fs.String("max-age", "", "remove turns whose last card is older, e.g. 720h (30 days); 0: no age limit")
	maxBytes := fs.String("max-bytes", "", "keep the newest turns whose cards fit in this size, e.g. 500MB or 2GiB; 0: no size limit")
	off := fs.Bool("off", false, "remove the project's retention policy (keep every turn)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("'turns retention' takes no arguments, got %v; use --max-age and --max-bytes", pos)
	}
	if err := card.ValidateName("project_id", pf.project); err != nil {
		return usagef("--project: %v", err)
	}
	if *off && (*maxAge != "" || *maxBytes != "") {
		return usagef("--off removes the policy; pass it alone, or --max-age/--max-bytes to set limits")
	}
	var age time.Duration
	if *maxAge != "" {
		if age, err = time.ParseDuration(*maxAge); err != nil {
			return usagef("--max-age %q is not a duration; use e.g. 720h (30 days), 90m, or 0 for no age limit", *maxAge)
		}
	}
	var size int64
	if *maxBytes != "" {
		if size, err = parseSize(*maxBytes); err != nil {
			return usagef("--max-bytes: %v", err)
		}
	}
	nc, err := mf.connect(ctx, "turns")
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
	cfg, err := cl.Config(ctx, pf.project)
	if err != nil {
		return fmt.Errorf("read the configuration of project %s: %w", pf.project, err)
	}
	pol, _, err := retention.PolicyOf(cfg.Retention)
	if err != nil {
		return err
	}
	if *off || *maxAge != "" || *maxBytes != "" {
		if *off {
			pol = retention.Policy{}
		}
		if *maxAge != "" {
			pol.MaxAge = age
		}
		if *maxBytes != "" {
			pol.MaxBytes = size
		}
		if err := pol.Check(); err != nil {
			return usagef("%v", err)
		}
		// The configuration is replaced whole: change only the retention.
		cfg.Retention = pol.Stored()
		if err := cl.PutConfig(ctx, pf.project, cfg); err != nil {
			return fmt.Errorf("store the retention policy of project %s: %w", pf.project, err)
		}
	}
	if mf.json {
		return writeJSON(c.env.stdout, struct {
			Project   string           `json:"project_id"`
			Retention retention.Policy `json:"retention"`
		}{pf.project, pol})
	}
	fmt.Fprintf(c.env.stdout, "project %s: %s\n", pf.project, pol)
	return nil
}

// parseSize reads a size: bytes, or a number with B, KB, MB, GB, TB
// (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024).
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if strings.HasSuffix(strings.ToLower(num), strings.ToLower(u.suffix)) {
			num, mult = strings.TrimSpace(num[:len(num)-len(u.suffix)]), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size; use bytes or a number with B, KB, MB, GB, TB, KiB, MiB, GiB or TiB, e.g. 500MB", s)
	}
	return n * mult, nil
}
