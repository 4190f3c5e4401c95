package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/subjects"
)

// add makes the identity's seed here and admits its public key.
func (c *identityCommand) add(ctx context.Context, args []string) error {
	fs, mf := newMeshFlagSet("identity add", identityUsage, c.env)
	tools := fs.String("tools", "", "worker: the tools it may serve, comma-separated (each tool's command target is its name)")
	projects := fs.String("projects", "", "worker: limit it to these projects, comma-separated (default: every project)")
	dir := fs.String("creds-dir", defaultCredsDir, "where to write the new seed (0600)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("identity add takes a role and its name: worker SERVICE --tools T1,T2, or agent PROJECT/AGENT")
	}
	id, err := identityToAdd(pos[0], pos[1], *tools, *projects)
	if err != nil {
		return err
	}
	name := id.Name()
	pub, created, err := meshauth.Ensure(*dir, name)
	if err != nil {
		return err
	}
	id.Key = pub
	cl, done, err := c.client(ctx, mf, "add")
	if err != nil {
		return err
	}
	defer done()
	rctx, cancel := context.WithTimeout(ctx, mf.timeout)
	defer cancel()
	list, err := cl.Add(rctx, id)
	if err != nil {
		return fmt.Errorf("identity add %s: %w", name, err)
	}
	if mf.json {
		return writeJSON(c.env.stdout, list)
	}
	seed := creds.SeedPath(*dir, name)
	how := "made"
	if !created {
		how = "reused"
	}
	fmt.Fprintf(c.env.stdout, "%s admitted (no restart); its seed (%s) is %s: hand it to that process only\n", name, how, seed)
	if id.Role == meshauth.RoleAgent {
		fmt.Fprintf(c.env.stdout, "its durable wakeup consumer %s is made on the mesh (agent.Client.Wakeups binds it)\n", streams.AgentWakeupConsumer(id.Project, id.Agent))
	}
	if id.Role == meshauth.RoleWorker {
		fmt.Fprintf(c.env.stdout, "serve it with your worker's --creds %s (or utpmesh worker --creds %s ...)\n", seed, seed)
	}
	return nil
}

// identityToAdd parses "worker SERVICE" or "agent PROJECT/AGENT".
func identityToAdd(role, name, tools, projects string) (meshauth.Identity, error) {
	switch role {
	case meshauth.RoleWorker:
		if strings.TrimSpace(tools) == "" {
			return meshauth.Identity{}, usagef("identity add worker %s needs --tools T1,T2: the tools it may serve", name)
		}
		id, err := newWorkerIdentity(name, tools)
		if err != nil {
			return meshauth.Identity{}, usagef("%v", err)
		}
		if projects != "" {
			for _, p := range strings.Split(projects, ",") {
				p = strings.TrimSpace(p)
				if err := subjects.ValidateToken("project_id", p); err != nil {
					return meshauth.Identity{}, usagef("--projects: %v (e.g. --projects demo,ops)", err)
				}
				id.Projects = append(id.Projects, p)
			}
		}
		return id, nil
	case meshauth.RoleAgent:
		project, agentID, ok := strings.Cut(name, "/")
		id := meshauth.Identity{Role: meshauth.RoleAgent, Project: project, Agent: agentID}
		if !ok || project == "" || agentID == "" {
			return meshauth.Identity{}, usagef("identity add agent takes PROJECT/AGENT, e.g. demo/alice")
		}
		if tools != "" || projects != "" {
			return meshauth.Identity{}, usagef("--tools and --projects are for worker identities; an agent identity is PROJECT/AGENT")
		}
		if err := id.Validate(); err != nil {
			return meshauth.Identity{}, usagef("%v", err)
		}
		return id, nil
	}
	return meshauth.Identity{}, usagef("identity add: role %q: use worker (SERVICE --tools T1,T2) or agent (PROJECT/AGENT)", role)
}
