package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/mesh/natsconf"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/catalog"
	"github.com/utpmesh/utpmesh/subjects"
)

func init() {
	register(spec{name: "nats-permissions", order: 15, summary: "print the mesh's roles as users of a NATS deployment 'up --nats' joins (nats-server config or nsc)",
		make: func(e env) command { return &natsPermsCommand{env: e} }})
}

const natsPermsUsage = `utpmesh nats-permissions [--format conf|nsc] [--account NAME] [--seeds DIR] [--raw-commands=false] [--protocol V] ROLE...
  ROLE: core (the mesh: 'up --nats --creds'), admin (admin work), operator or operator-NAME (a human operator),
        agent-PROJECT (agent runtimes of a project) or agent-PROJECT.AGENT (one agent),
        worker-SERVICE (a catalogue service, e.g. worker-atlas.tasks) or worker-SERVICE=TOOL[,TOOL...] (a tool program of your own)`

// natsPermsCommand prints what each of the mesh's roles may do, as the
// users of a NATS account (docs/cluster.md): the same permissions an
// embedded mesh gives its nkey identities (internal/meshauth).
type natsPermsCommand struct{ env env }

func (c *natsPermsCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("nats-permissions", natsPermsUsage, c.env)
	format := fs.String("format", "conf", "conf: an accounts block for nats-server's configuration file (nkey users); nsc: nsc commands (accounts/JWT)")
	account := fs.String("account", "MESH", "the mesh's account")
	seeds := fs.String("seeds", "", "with --format conf: fill each user's public nkey from its seed DIR/NAME.nk, making the seed when missing (otherwise a placeholder)")
	version := fs.String("protocol", subjects.DefaultVersion, "UTP protocol version token of the mesh's subjects")
	raw := fs.Bool("raw-commands", true, "agent identities may publish raw tool and PMO commands (the embedded mesh's default); false: they dispatch through the mesh only")
	roles, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(roles) == 0 {
		return usagef("name at least one role, e.g. 'utpmesh nats-permissions core admin agent-demo worker-echo'")
	}
	if err := subjects.ValidateToken("protocol version", *version); err != nil {
		return usagef("--protocol: %v", err)
	}
	if *format != "conf" && *format != "nsc" {
		return usagef("--format %q: use conf (nats-server configuration) or nsc (nsc commands)", *format)
	}
	if *seeds != "" && *format != "conf" {
		return usagef("--seeds needs --format conf (nsc makes the users' keys itself)")
	}
	if err := subjects.ValidateToken("account", *account); err != nil {
		return usagef("--account: %v", err)
	}
	keyOf := func(string) (string, error) { return "", nil } // a placeholder
	if *seeds != "" {
		keyOf = func(name string) (string, error) {
			pub, _, err := meshauth.Ensure(*seeds, name)
			return pub, err
		}
	}
	users, err := roleUsers(ctx, *version, roles, *raw, keyOf)
	if err != nil {
		return err
	}
	if *format == "nsc" {
		return natsconf.NSC(c.env.stdout, *account, users)
	}
	return natsconf.Conf(c.env.stdout, *account, users)
}

// roleUsers resolves role names to the account's users with their
// permissions; keyOf gives each user's public nkey by its name ("" when
// unknown: Conf writes a placeholder).
func roleUsers(ctx context.Context, ver string, roles []string, raw bool, keyOf func(name string) (string, error)) ([]natsconf.User, error) {
	var out []natsconf.User
	seen := map[string]bool{}
	for _, r := range roles {
		id, comment, err := roleIdentity(ctx, r)
		if err != nil {
			return nil, err
		}
		id.RawCommands = id.Role == meshauth.RoleAgent && raw
		if err := id.Validate(); err != nil {
			return nil, usagef("role %s: %v", r, err)
		}
		if seen[id.Name()] {
			return nil, usagef("role %s is given twice", id.Name())
		}
		seen[id.Name()] = true
		key, err := keyOf(id.Name())
		if err != nil {
			return nil, err
		}
		// The identity's reply inboxes are under its key
		// (creds.InboxPrefix); without one, under the placeholder.
		id.Key = key
		if key == "" {
			id.Key = natsconf.Placeholder(id.Name())
		}
		out = append(out, natsconf.User{Name: id.Name(), Nkey: key, Permissions: meshauth.Permissions(ver, id), Comment: comment})
	}
	return out, nil
}

// roleIdentity is the identity a role name stands for, and a comment
// saying who uses it.
func roleIdentity(ctx context.Context, role string) (meshauth.Identity, string, error) {
	switch {
	case role == meshauth.RoleCore:
		return meshauth.Identity{Role: meshauth.RoleCore}, "the mesh's own services ('utpmesh up --nats URL --creds core.creds'): every subject of the account", nil
	case role == meshauth.RoleAdmin:
		return meshauth.Identity{Role: meshauth.RoleAdmin}, "admin work (streams, every CLI command): every subject of the account", nil
	case role == meshauth.RoleOperator:
		return meshauth.Identity{Role: meshauth.RoleOperator}, "a human operator: its dispatch subject, policies, reads of every project", nil
	case strings.HasPrefix(role, meshauth.RoleOperator+"-"):
		n := strings.TrimPrefix(role, meshauth.RoleOperator+"-")
		return meshauth.Identity{Role: meshauth.RoleOperator, Operator: n}, "the operator " + n + ": its dispatch subject, policies, reads of every project", nil
	case strings.HasPrefix(role, meshauth.RoleAgent+"-"):
		p, a, one := strings.Cut(strings.TrimPrefix(role, meshauth.RoleAgent+"-"), ".")
		if one {
			return meshauth.Identity{Role: meshauth.RoleAgent, Project: p, Agent: a}, "the agent " + a + " of project " + p, nil
		}
		return meshauth.Identity{Role: meshauth.RoleAgent, Project: p}, "agent runtimes of project " + p, nil
	case strings.HasPrefix(role, meshauth.RoleWorker+"-"):
		spec := strings.TrimPrefix(role, meshauth.RoleWorker+"-")
		if strings.Contains(spec, "=") {
			var w workerIdentities
			if err := w.Set(spec); err != nil {
				return meshauth.Identity{}, "", usagef("role %s: %v", role, err)
			}
			return w[0], "a tool program of your own serving " + strings.SplitN(spec, "=", 2)[1], nil
		}
		svc, err := catalog.Lookup(spec)
		if err != nil {
			return meshauth.Identity{}, "", usagef("role %s: %v (or worker-SERVICE=TOOL[,TOOL...] for a tool program of your own)", role, err)
		}
		ts, err := describeService(ctx, svc.Name)
		if err != nil {
			return meshauth.Identity{}, "", err
		}
		id := workerIdentity(svc.Name, ts)
		return id, "'utpmesh worker " + svc.Name + "' (" + creds.WorkerName(svc.Name) + ")", nil
	}
	return meshauth.Identity{}, "", usagef("unknown role %q: want core, admin, operator, operator-NAME, agent-PROJECT, agent-PROJECT.AGENT, worker-SERVICE or worker-SERVICE=TOOL[,TOOL...]", role)
}

// describeService builds a catalogue service's tools only to list them:
// in a throwaway directory, never connected (its connection would come
// through catalog.Late, which is never set).
func describeService(ctx context.Context, name string) ([]worker.Tool, error) {
	dir, err := os.MkdirTemp("", "utpmesh-nats-permissions-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ts, err := catalog.Build([]string{name}, catalog.Deps{DataDir: dir, Context: bctx, Late: catalog.NewLate(), AtlasState: "jetstream", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", name, err)
	}
	return ts, nil
}
