package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/internal/datalock"
)

func init() {
	register(spec{name: "compact", order: 75, summary: "shrink the data directory's bbolt files (with the mesh stopped)",
		make: func(e env) command { return &compactCommand{env: e} }})
}

type compactCommand struct{ env env }

const compactSynopsis = `utpmesh compact [--data DIR] [--json]

Rewrites every bbolt file of the data directory (DIR/*.db and DIR/*/*.db:
cards, inbox, registry, policies, the catalogues' files) into a copy that
holds only live pages, checks the copy (bbolt's consistency check and the
same keys and values as the original), and swaps it in. bbolt reuses the
pages that deleted data (retention) frees but never gives them back to the
file system: compaction does. The mesh must be stopped: compact takes the
data directory's lock and refuses while 'utpmesh up' holds it. JetStream's
files are not touched (their limits and deletes shrink them).`

func (c *compactCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("compact", compactSynopsis, c.env)
	data := fs.String("data", "./utpmesh-data", "the mesh's data directory")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q (compact takes flags only: --data DIR)", pos[0])
	}
	if _, err := os.Stat(*data); err != nil {
		return usagef("--data %s: %v (pass the directory 'utpmesh up --data' uses)", *data, err)
	}
	lock, err := datalock.Acquire(*data, "utpmesh compact")
	if err != nil {
		var inUse *datalock.InUseError
		if errors.As(err, &inUse) {
			return fmt.Errorf("%w: stop the mesh first, then run 'utpmesh compact --data %s' again", err, *data)
		}
		return err
	}
	defer lock.Release()
	var files []string
	for _, pat := range []string{"*.db", "*/*.db"} {
		m, err := filepath.Glob(filepath.Join(*data, pat))
		if err != nil {
			return err
		}
		files = append(files, m...)
	}
	sort.Strings(files)
	var results []*boltfile.CompactResult
	var before, after int64
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		r, err := boltfile.Compact(f, 0)
		if err != nil {
			return err
		}
		results = append(results, r)
		before, after = before+r.Before, after+r.After
	}
	if *asJSON {
		return writeJSON(c.env.stdout, results)
	}
	for _, r := range results {
		fmt.Fprintf(c.env.stdout, "%-40s %10d → %10d bytes  (%d keys, checked)\n", r.Path, r.Before, r.After, r.Keys)
	}
	fmt.Fprintf(c.env.stdout, "%d files: %d → %d bytes\n", len(results), before, after)
	return nil
}
