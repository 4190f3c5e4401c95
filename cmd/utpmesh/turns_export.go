package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/retention"
)

const turnsExportSynopsis = `utpmesh turns export [--project P] [--turn T] [--before TIME] FILE

Writes turns to FILE (- for standard output) as JSON lines, one card per
line in its canonical encoding, each turn's cards in replay order and the
turns oldest first: the format of the archive retention writes. --turn
exports one turn; --before keeps the turns whose last card is older than
TIME (RFC 3339, e.g. 2026-01-31T00:00:00Z, or a duration back from now,
e.g. 720h). Without either, every turn of the project is exported.`

func (c *turnsCommand) export(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("turns export", turnsExportSynopsis, c.env)
	turnID := fs.String("turn", "", "export this turn only")
	beforeS := fs.String("before", "", "only turns whose last card is older than this time (RFC 3339) or duration back from now (720h)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("name the file to write, e.g. 'utpmesh turns export --project demo turns.jsonl' (- for standard output)")
	}
	if err := card.ValidateName("project_id", pf.project); err != nil {
		return usagef("--project: %v", err)
	}
	var before time.Time
	if *beforeS != "" {
		if before, err = parseBefore(*beforeS, time.Now()); err != nil {
			return usagef("--before: %v", err)
		}
	}
	nc, store, err := openStore(ctx, mf, pf, "turns")
	if err != nil {
		return err
	}
	defer nc.Close()
	var turns []string
	if *turnID != "" {
		turns = []string{*turnID}
	} else {
		req := cardstore.ListTurnsRequest{ProjectID: pf.project, Limit: cardstore.MaxPage}
		for {
			page, err := store.ListTurns(ctx, req)
			if err != nil {
				return err
			}
			for _, ti := range page.Turns {
				if before.IsZero() || ti.LastAt.Before(before) {
					turns = append(turns, ti.AgentTurnID)
				}
			}
			if page.Next == 0 {
				break
			}
			req.Before = page.Next
		}
		for i, j := 0, len(turns)-1; i < j; i, j = i+1, j-1 { // oldest first
			turns[i], turns[j] = turns[j], turns[i]
		}
	}
	var w io.Writer = c.env.stdout
	var f *os.File
	if pos[0] != "-" {
		if f, err = os.OpenFile(pos[0], os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	ncards := 0
	for _, t := range turns {
		cards, err := cardstore.AllTurn(ctx, store, pf.project, t)
		if err != nil {
			return fmt.Errorf("export turn %s: %w", t, err)
		}
		if *turnID != "" && len(cards) == 0 {
			return fmt.Errorf("project %s has no card of turn %q (find turns with 'utpmesh turns ls')", pf.project, t)
		}
		if err := retention.WriteJSONL(bw, cards); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		ncards += len(cards)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if f != nil {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		fmt.Fprintf(c.env.stderr, "exported %d turns, %d cards to %s\n", len(turns), ncards, pos[0])
	}
	return nil
}

// parseBefore reads an RFC 3339 time or a duration back from now.
func parseBefore(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither a time (RFC 3339, e.g. 2026-01-31T00:00:00Z) nor a duration back from now (e.g. 720h)", s)
}
