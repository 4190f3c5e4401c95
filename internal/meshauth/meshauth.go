// Package meshauth defines the mesh's NATS identities: one nkey user per
// role instance, its seed file, and the publish/subscribe permissions that
// allow exactly its part of the protocol (docs/security.md, roles table).
// It is the server half; clients load their seed with pkg/creds.
//
// Roles:
//
//   - core: the mesh process itself (CardStore, registry, inbox, authz,
//     PMO and its own worker). Everything.
//   - admin: the operator CLI. Everything; the only identity besides the
//     core that may write policies, configs and the registry, publish
//     wakeups or reports, or read tool commands.
//   - agent-<project>: an agent runtime of one project. Tool and PMO
//     commands, the CardStore, registry reads, the inbox and authz reads
//     of that project only; its wakeups as a core subscription.
//   - worker-<service>: a tool worker serving the given tools in every
//     project: only its tools' durable consumers, reports, dead letters,
//     authz decision records, the CardStore but claims and results, the
//     registry and authz reads; claims, releases, results and its own
//     registry entries only on its tools' subjects (svc.<service>.<op>.<tool>).
//
// Why nkey users rather than accounts/JWT: a mesh is one trust domain
// with one JetStream account, and every identity is minted by `utpmesh up`
// from its data directory; nkeys give per-identity keys (the seed never
// leaves the holder: the server checks a signature of its nonce) and the
// server's own permission enforcement without an operator/account
// hierarchy or a resolver to run. The cost: changing a permission or
// revoking an identity means restarting `up` (accounts/JWT could push it
// live); docs/security.md says how.
package meshauth

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/subjects"
)

// Role names (pkg/creds, the client half of the identities).
const (
	RoleCore   = creds.RoleCore
	RoleAdmin  = creds.RoleAdmin
	RoleAgent  = creds.RoleAgent
	RoleWorker = creds.RoleWorker
)

// ErrCreds: a credentials file is missing or unreadable (creds.ErrCreds).
var ErrCreds = creds.ErrCreds

// Tool is a tool a worker identity may serve: its name (the durable
// consumer utp_tool_<name>) and the target of its command subject
// (cg.<v>.*.*.cmd.tool.<target>).
type Tool struct {
	Name   string
	Target string
}

// Identity is one NATS user of the mesh.
type Identity struct {
	// Role is one of the Role* constants.
	Role string
	// Project scopes an agent identity.
	Project string
	// Service names a worker identity; Tools are what it may serve.
	Service string
	Tools   []Tool
	// Publish and Subscribe are further subjects a worker identity may
	// use: its service's own (the shared state's JetStream subjects, the
	// endpoints it serves), as the service declares them.
	Publish, Subscribe []string
}

// Name is the identity's file and user name: core, admin,
// agent-<project>, worker-<service>.
func (id Identity) Name() string {
	switch id.Role {
	case RoleAgent:
		return creds.AgentName(id.Project)
	case RoleWorker:
		return creds.WorkerName(id.Service)
	}
	return id.Role
}

// Validate checks the identity's fields.
func (id Identity) Validate() error {
	switch id.Role {
	case RoleCore, RoleAdmin:
		return nil
	case RoleAgent:
		if err := subjects.ValidateToken("project_id", id.Project); err != nil {
			return fmt.Errorf("meshauth: agent identity: %w", err)
		}
		return nil
	case RoleWorker:
		if id.Service == "" || len(id.Tools) == 0 {
			return fmt.Errorf("meshauth: worker identity needs a service and its tools")
		}
		for _, t := range id.Tools {
			if err := subjects.ValidateToken("tool target", strings.ReplaceAll(t.Target, ".", "_")); err != nil || t.Name == "" {
				return fmt.Errorf("meshauth: worker %s: tool %q target %q: want a tool name and a cmd.tool target", id.Service, t.Name, t.Target)
			}
		}
		return nil
	}
	return fmt.Errorf("meshauth: unknown role %q (want %s, %s, %s or %s)", id.Role, RoleCore, RoleAdmin, RoleAgent, RoleWorker)
}

// Permissions returns what id may publish and subscribe to under protocol
// version ver; nil means everything (core, admin).
func Permissions(ver string, id Identity) *server.Permissions {
	cmd, evt := streams.CommandStream(ver), streams.EventStream(ver)
	switch id.Role {
	case RoleAgent:
		p := "cg." + ver + "." + id.Project + ".*."
		// Calls go through the mesh's admission (svc.dispatch): an agent
		// publishes no tool command itself (issue 23).
		pub := []string{
			p + "svc.dispatch.call.*", p + "svc.dispatch.keys",
			p + "svc.registry.get", p + "svc.registry.list",
			p + "svc.inbox.list", p + "svc.inbox.get", p + "svc.inbox.ack", p + "svc.inbox.set_epoch",
			p + "svc.worker.*",
			"$SRV.>",
			"$JS.API.INFO",
		}
		for _, op := range []string{"get", "config_get", "test", "query", "history", "history_get", "issuer_key"} {
			pub = append(pub, p+"svc.authz."+op)
		}
		// CardStore ops but put_result, claim and release: results and
		// execution claims are the workers'.
		for _, op := range []string{"put", "get", "get_many", "list_turn", "find_result", "box_create", "box_append", "box_get",
			"list_turns", "get_claim"} {
			pub = append(pub, p+"svc.cardstore."+op)
		}
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: pub},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>", p + "cmd.agent.*.wakeup"}},
		}
	case RoleWorker:
		a := "cg." + ver + ".*.*."
		pub := []string{
			a + "cmd.sys.inbox.report", a + "svc.inbox.report",
			a + "evt.sys.deadletter.command",
			a + "evt.sys.authz.decision",
			a + "svc.registry.get", a + "svc.registry.list",
			a + "svc.authz.get", a + "svc.authz.config_get", a + "svc.authz.issuer_key",
			a + "svc.dispatch.keys",
			"$JS.API.INFO",
		}
		for _, s := range []string{cmd, streams.WakeupStream(ver), evt} {
			pub = append(pub, "$JS.API.STREAM.CREATE."+s, "$JS.API.STREAM.UPDATE."+s, "$JS.API.STREAM.INFO."+s)
		}
		sub := []string{"_INBOX.>", a + "evt.sys.toolcall.cancel", a + "svc.worker.*", "$SRV.>"}
		// The CardStore but start_call, claim, release and put_result,
		// which a worker does only on its own tools' subjects (below): the
		// server checks the call and its claim against the subject's tool.
		for _, op := range []string{"put", "get", "get_many", "list_turn", "find_result", "box_create", "box_append", "box_get",
			"list_turns", "get_claim", "claim_key", "release_key"} {
			pub = append(pub, a+"svc.cardstore."+op)
		}
		for _, t := range id.Tools {
			for _, op := range []string{"start_call", "claim", "release", "put_result"} {
				p, _ := subjects.ToolServiceAllow(ver, "cardstore", op, t.Name)
				pub = append(pub, p)
			}
			// Registering its own tools at start; never another's, never delete.
			p, _ := subjects.ToolServiceAllow(ver, "registry", "put", t.Name)
			pub = append(pub, p)
		}
		for _, t := range id.Tools {
			d := streams.ToolConsumer(t.Name)
			// Create only with the tool's own filter in the subject (the
			// server refuses a body whose filter differs): a worker cannot
			// widen its durable to other tools' commands.
			pub = append(pub,
				"$JS.API.CONSUMER.CREATE."+cmd+"."+d+"."+a+"cmd.tool."+t.Target,
				"$JS.API.CONSUMER.INFO."+cmd+"."+d,
				"$JS.API.CONSUMER.MSG.NEXT."+cmd+"."+d,
				"$JS.ACK."+cmd+"."+d+".>")
		}
		pub, sub = append(pub, id.Publish...), append(sub, id.Subscribe...)
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: pub},
			Subscribe: &server.SubjectPermission{Allow: sub},
			// Micro discovery and describe requests are answered on the
			// requester's reply subject.
			Response: &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute},
		}
	}
	return nil
}

// Ensure returns the public key of the identity named name, creating its
// seed file under dir (mode 0600, directory 0700) when there is none.
func Ensure(dir, name string) (pub string, created bool, err error) {
	path := creds.SeedPath(dir, name)
	if data, err := os.ReadFile(path); err == nil {
		kp, err := nkeys.FromSeed(bytes.TrimSpace(data))
		if err != nil {
			return "", false, fmt.Errorf("%w: %s is not an nkey seed: %v (delete it to have a new one made)", ErrCreds, path, err)
		}
		pub, err := kp.PublicKey()
		return pub, false, err
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("%w: %v", ErrCreds, err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", false, fmt.Errorf("meshauth: create nkey: %w", err)
	}
	seed, _ := kp.Seed()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", false, fmt.Errorf("meshauth: credentials directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return Ensure(dir, name) // created concurrently
	}
	if err != nil {
		return "", false, fmt.Errorf("meshauth: write %s: %w", path, err)
	}
	_, werr := f.Write(append(seed, '\n'))
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		return "", false, fmt.Errorf("meshauth: write %s: %w", path, err)
	}
	pub, err = kp.PublicKey()
	return pub, true, err
}

// Names lists the identities' names, sorted (for messages).
func Names(ids []Identity) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, id.Name())
	}
	sort.Strings(out)
	return out
}
