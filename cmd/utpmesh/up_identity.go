package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/services/catalog"
	"github.com/utpmesh/utpmesh/subjects"
)

// workerIdentityUsage is the --worker-identity flag's help, also the hint
// of its errors.
const workerIdentityUsage = "make a worker identity worker-SERVICE.nk for a tool service outside the catalogue, allowed to serve exactly these tools: SERVICE=TOOL[,TOOL...], e.g. reverse=reverse (repeatable; docs/write-a-tool-service.md)"

// errWorkerIdentity: a --worker-identity value is malformed.
var errWorkerIdentity = errors.New("want SERVICE=TOOL[,TOOL...], e.g. --worker-identity reverse=reverse")

// workerIdentities is the repeatable --worker-identity flag of up: worker
// identities for tool programs outside the catalogue (docs/security.md).
type workerIdentities []meshauth.Identity

func (w *workerIdentities) String() string {
	if w == nil {
		return ""
	}
	var out []string
	for _, id := range *w {
		var tools []string
		for _, t := range id.Tools {
			tools = append(tools, t.Name)
		}
		out = append(out, id.Service+"="+strings.Join(tools, ","))
	}
	return strings.Join(out, " ")
}

// Set parses SERVICE=TOOL[,TOOL...]. Each tool's command target is its
// name (worker.Tool's default Target): the identity may consume
// cg.<v>.*.*.cmd.tool.<tool> and nothing else.
func (w *workerIdentities) Set(v string) error {
	service, list, ok := strings.Cut(v, "=")
	service = strings.TrimSpace(service)
	if !ok || service == "" || strings.TrimSpace(list) == "" {
		return errWorkerIdentity
	}
	for _, id := range *w {
		if creds.WorkerName(id.Service) == creds.WorkerName(service) {
			return fmt.Errorf("%s is given twice: list all its tools in one --worker-identity %s=TOOL,TOOL", service, service)
		}
	}
	id, err := newWorkerIdentity(service, list)
	if err != nil {
		return err
	}
	*w = append(*w, id)
	return nil
}

// newWorkerIdentity is the worker identity of a service outside the
// catalogue serving the comma-separated tools of list (each tool's
// command target is its name).
func newWorkerIdentity(service, list string) (meshauth.Identity, error) {
	if err := checkDotted("service", service); err != nil {
		return meshauth.Identity{}, fmt.Errorf("%w (%v)", errWorkerIdentity, err)
	}
	if _, err := catalog.Lookup(service); err == nil {
		return meshauth.Identity{}, fmt.Errorf("%s is a catalogue service: up makes %s.nk for it already; name the outside service differently", service, creds.WorkerName(service))
	}
	id := meshauth.Identity{Role: meshauth.RoleWorker, Service: service}
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if err := checkDotted("tool", name); err != nil {
			return meshauth.Identity{}, fmt.Errorf("%w (%v)", errWorkerIdentity, err)
		}
		if registry.IsReserved(name) {
			return meshauth.Identity{}, fmt.Errorf("%q is a built-in PMO tool, which only the mesh serves", name)
		}
		if !seen[name] {
			seen[name] = true
			id.Tools = append(id.Tools, meshauth.Tool{Name: name, Target: name})
		}
	}
	if err := id.Validate(); err != nil {
		return meshauth.Identity{}, fmt.Errorf("%w (%v)", errWorkerIdentity, err)
	}
	return id, nil
}

// checkToolsOwned refuses two worker identities that cover one tool (by
// name or command target): a --worker-identity may not take over a tool a
// catalogue service serves, or another's. Stateful catalogue services up
// does not serve are not built here, so their tools are not known to it.
func checkToolsOwned(ids []meshauth.Identity) error {
	owner := map[string]string{}
	for _, id := range ids {
		for _, t := range id.Tools {
			for _, key := range []string{t.Name, t.Target} {
				if o, ok := owner[key]; ok && o != id.Service {
					return usagef("--worker-identity: tool %s is served by %s already (%s); an identity covers tools no other service serves",
						key, o, creds.WorkerName(o))
				}
				owner[key] = id.Service
			}
		}
	}
	return nil
}

// checkDotted checks a tool or service name: dot-separated subject tokens
// (a tool's name is its cmd.tool target).
func checkDotted(what, s string) error {
	if s == "" {
		return fmt.Errorf("empty %s name", what)
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" {
			return fmt.Errorf("%s %q has an empty part between dots", what, s)
		}
		if err := subjects.ValidateToken(what, tok); err != nil {
			return err
		}
	}
	return nil
}

// bannerLines are up's banner lines for the identities: where each
// file is and which tools it covers.
func (w workerIdentities) bannerLines(credsDir string) []string {
	var out []string
	for _, id := range w {
		var tools []string
		for _, t := range id.Tools {
			tools = append(tools, t.Name)
		}
		out = append(out, fmt.Sprintf("%s serves %s (--worker-identity)", creds.SeedPath(credsDir, id.Name()), strings.Join(tools, ", ")))
	}
	return out
}

// agentIdentities is the repeatable --agent-identity flag of up: one
// identity per agent (PROJECT/AGENT).
type agentIdentities []meshauth.Identity

func (a *agentIdentities) String() string {
	var out []string
	for _, id := range *a {
		out = append(out, id.Project+"/"+id.Agent)
	}
	return strings.Join(out, " ")
}

// Set parses PROJECT/AGENT.
func (a *agentIdentities) Set(v string) error {
	id, err := identityToAdd(meshauth.RoleAgent, v, "", "")
	if err != nil {
		return err
	}
	*a = append(*a, id)
	return nil
}
