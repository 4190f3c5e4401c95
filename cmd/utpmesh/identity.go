package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/utpmesh/utpmesh/pkg/identity"
)

func init() {
	register(spec{name: "identity", order: 45, summary: "add, list and remove NATS identities while the mesh runs (admin or operator)",
		make: func(e env) command { return &identityCommand{env: e} }})
}

type identityCommand struct{ env env }

const identityUsage = `utpmesh identity add worker SERVICE --tools T1,T2 [--projects P,...] [--creds-dir DIR]
                                     make worker-SERVICE.nk under DIR and admit it live: it may serve
                                     exactly these tools (in these projects only, with --projects)
utpmesh identity add agent PROJECT/AGENT [--creds-dir DIR]
                                     make agent-PROJECT.AGENT.nk: one agent of one project
utpmesh identity list                list every identity the mesh admits
utpmesh identity remove NAME         revoke an added identity (its connections are closed)

The seed is made here and never sent: the mesh gets its public key only.
Needs admin.nk or operator.nk (--creds).`

func (c *identityCommand) Run(ctx context.Context, args []string) error {
	return dispatch(ctx, c.env, "identity", "Usage:\n"+identityUsage+"\n", []sub{
		{names: []string{"add"}, run: c.add},
		{names: []string{"list", "ls"}, run: c.list},
		{names: []string{"remove", "rm"}, run: c.remove},
	}, args)
}

// client connects with mf and returns the identity service's client.
func (c *identityCommand) client(ctx context.Context, mf *meshFlags, what string) (*identity.Client, func(), error) {
	nc, err := mf.connect(ctx, "identity-"+what)
	if err != nil {
		return nil, nil, err
	}
	cl, err := identity.NewClient(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return cl, nc.Close, nil
}

// printIdentities prints the identity list as a table.
func printIdentities(w io.Writer, list []identity.Entry) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tADDED\tSCOPE")
	for _, e := range list {
		var scope []string
		switch {
		case len(e.ID.Tools) > 0:
			var tools []string
			for _, t := range e.ID.Tools {
				tools = append(tools, t.Name)
			}
			scope = append(scope, "tools "+strings.Join(tools, ","))
			if len(e.ID.Projects) > 0 {
				scope = append(scope, "projects "+strings.Join(e.ID.Projects, ","))
			}
		case e.ID.Project != "":
			scope = append(scope, "project "+e.ID.Project)
			if e.ID.Agent != "" {
				scope = append(scope, "agent "+e.ID.Agent)
			}
			if e.ID.RawCommands {
				scope = append(scope, "raw commands")
			}
		}
		added := "-"
		if e.Added {
			added = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Name, e.ID.Role, added, strings.Join(scope, "; "))
	}
	return tw.Flush()
}
