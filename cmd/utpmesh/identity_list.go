package main

import "context"

// list prints every identity the mesh admits.
func (c *identityCommand) list(ctx context.Context, args []string) error {
	fs, mf := newMeshFlagSet("identity list", identityUsage, c.env)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("identity list takes no argument (got %q)", pos[0])
	}
	cl, done, err := c.client(ctx, mf, "list")
	if err != nil {
		return err
	}
	defer done()
	rctx, cancel := context.WithTimeout(ctx, mf.timeout)
	defer cancel()
	list, err := cl.List(rctx)
	if err != nil {
		return err
	}
	if mf.json {
		return writeJSON(c.env.stdout, list)
	}
	return printIdentities(c.env.stdout, list)
}
