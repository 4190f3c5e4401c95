package main

import (
	"context"
	"fmt"
)

// remove revokes an added identity.
func (c *identityCommand) remove(ctx context.Context, args []string) error {
	fs, mf := newMeshFlagSet("identity remove", identityUsage, c.env)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("identity remove takes one NAME, e.g. utpmesh identity remove worker-reverse (utpmesh identity list shows them)")
	}
	cl, done, err := c.client(ctx, mf, "remove")
	if err != nil {
		return err
	}
	defer done()
	rctx, cancel := context.WithTimeout(ctx, mf.timeout)
	defer cancel()
	list, err := cl.Remove(rctx, pos[0])
	if err != nil {
		return fmt.Errorf("identity remove %s: %w", pos[0], err)
	}
	if mf.json {
		return writeJSON(c.env.stdout, list)
	}
	fmt.Fprintf(c.env.stdout, "%s revoked: its connections are closed and it can connect no more (its seed file may be deleted)\n", pos[0])
	return nil
}
