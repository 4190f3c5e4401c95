// Package meshauth defines the mesh's NATS identities: one nkey user per
// role instance, its seed file, and the publish/subscribe permissions that
// allow exactly its part of the protocol (docs/security.md, roles table).
// It is the server half; clients load their seed with pkg/creds.
//
// Roles:
//
//   - core: the mesh process itself (CardStore, registry, inbox, authz,
//     PMO, the streams and buckets, its own worker). Everything.
//   - admin: the admin CLI. Everything; the only identity besides the
//     core that may publish wakeups or reports, read tool commands or
//     manage streams.
//   - operator: a human operator (operator.nk): its own dispatch subject
//     (svc.dispatch.operator.<name>), policy and identity changes, reads
//     of every project, its own calls (agent id op-<name>,
//     utp.OperatorAgentID): their cards, inbox entries (list, get, ack)
//     and wakeups, on that agent id's scoped subjects; no streams, no
//     commands, no results, no other inbox acks.
//   - agent-<project>: an agent runtime of one project, for any of its
//     agents. Its dispatch subjects, raw tool and PMO commands only when
//     the project opted in (RawCommands), the CardStore (plain and every
//     agent's scoped subjects), registry reads, the inbox and authz reads
//     of that project only; its agents' wakeups, and the project's
//     durable wakeup consumer (AgentDurables: bind, fetch, acknowledge;
//     never create).
//   - agent-<project>.<agent>: one agent. As agent-<project>, but its own
//     agent's subjects only: dispatch (svc.dispatch.call.<agent>), the
//     CardStore and inbox on their agent-scoped subjects
//     (svc.cardstore.<op>.<agent>, svc.inbox.<op>.<agent>: the services
//     serve that agent's cards, turns and entries only), its wakeups and
//     its own durable wakeup consumer (AgentDurables). It still reads the
//     project's registry and policies.
//   - worker-<service>: a tool worker serving the given tools in every
//     project or in Projects only: its tools' durable consumers (bind,
//     fetch, acknowledge), reports, dead letters, authz decision records,
//     the CardStore but claims and results, registry and authz reads;
//     claims, releases, results and its own registry entries only on its
//     tools' subjects (svc.<service>.<op>.<tool>), leases only in its
//     service's namespace (svc.cardstore.claim_key.<LeaseToken(service)>).
//     No stream management: the core creates every stream and bucket.
//
// Every identity but core and admin subscribes only to its own reply-inbox
// prefix (creds.InboxPrefix of its public key), so replies, JetStream
// deliveries and acknowledgements of one identity are not another's.
//
// Why nkey users rather than accounts/JWT: a mesh is one trust domain
// with one JetStream account, and every identity is minted by `utpmesh up`
// or `utpmesh identity add` (the seed never leaves the holder: the server
// checks a signature of its nonce) and enforced by the server without an
// operator/account hierarchy or a resolver to run. Permissions change
// live: the mesh reloads the server's users (embednats.Server.SetUsers).
package meshauth

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/subjects"
)

// Role names (pkg/creds, the client half of the identities).
const (
	RoleCore     = creds.RoleCore
	RoleAdmin    = creds.RoleAdmin
	RoleAgent    = creds.RoleAgent
	RoleWorker   = creds.RoleWorker
	RoleOperator = creds.RoleOperator
)

// DefaultOperator is the name of the operator identity `utpmesh up`
// writes (operator.nk) and its dispatch token.
const DefaultOperator = "operator"

// Errors.
var (
	// ErrCreds: a credentials file is missing or unreadable (creds.ErrCreds).
	ErrCreds = creds.ErrCreds
	// ErrIdentity: an identity's fields are invalid; the message names the
	// field and what to pass instead.
	ErrIdentity = errors.New("meshauth: invalid identity")
)

// Tool is a tool a worker identity may serve: its name (the durable
// consumer utp_tool_<name>) and the target of its command subject
// (cg.<v>.*.*.cmd.tool.<target>).
type Tool struct {
	Name   string `json:"name"`
	Target string `json:"target"`
}

// Identity is one NATS user of the mesh.
type Identity struct {
	// Role is one of the Role* constants.
	Role string `json:"role"`
	// Key is the identity's public nkey (U…); the mesh fills it from the
	// seed file it makes, `utpmesh identity add` sends it. Permissions
	// need it: the identity's reply inboxes are under
	// creds.InboxPrefix(Key).
	Key string `json:"key,omitempty"`
	// Project scopes an agent identity.
	Project string `json:"project,omitempty"`
	// Agent, for an agent identity, limits it to one agent id: it may
	// dispatch only as that agent, use the CardStore and the inbox only on
	// that agent's scoped subjects and receive only its wakeups. Empty:
	// every agent of Project.
	Agent string `json:"agent,omitempty"`
	// RawCommands lets an agent identity publish raw tool and PMO commands
	// (cmd.tool.*, cmd.sys.pmo.internal.*), the project's explicit opt-in;
	// false: it dispatches through the mesh (svc.dispatch.call.<agent>).
	RawCommands bool `json:"raw_commands,omitempty"`
	// Operator names an operator identity (default DefaultOperator): its
	// dispatch subject's last token.
	Operator string `json:"operator,omitempty"`
	// Service names a worker identity; Tools are what it may serve.
	Service string `json:"service,omitempty"`
	Tools   []Tool `json:"tools,omitempty"`
	// Projects limits a worker identity to these projects: every subject
	// of its permissions names one of them. Empty: every project.
	Projects []string `json:"projects,omitempty"`
	// Publish and Subscribe are further subjects a worker identity may
	// use: its service's own (its buckets' data subjects, the endpoints
	// it serves), as the service declares them.
	Publish   []string `json:"publish,omitempty"`
	Subscribe []string `json:"subscribe,omitempty"`
}

// Name is the identity's file and user name: core, admin, operator (or
// operator-<name>), agent-<project> (or agent-<project>.<agent>),
// worker-<service>.
func (id Identity) Name() string {
	switch id.Role {
	case RoleAgent:
		if id.Agent != "" {
			return creds.AgentName(id.Project) + "." + subjects.ToolToken(id.Agent)
		}
		return creds.AgentName(id.Project)
	case RoleWorker:
		return creds.WorkerName(id.Service)
	case RoleOperator:
		if id.Operator != "" && id.Operator != DefaultOperator {
			return RoleOperator + "-" + subjects.ToolToken(id.Operator)
		}
	}
	return id.Role
}

// Validate checks the identity's fields.
func (id Identity) Validate() error {
	if id.Key != "" && !nkeys.IsValidPublicUserKey(id.Key) {
		return fmt.Errorf("%w: key %q is not a public user nkey (U…)", ErrIdentity, id.Key)
	}
	switch id.Role {
	case RoleCore, RoleAdmin:
		return nil
	case RoleOperator:
		if id.Operator != "" {
			if err := subjects.ValidateToken("operator name", id.Operator); err != nil {
				return fmt.Errorf("%w: operator: %w", ErrIdentity, err)
			}
		}
		return nil
	case RoleAgent:
		if err := subjects.ValidateToken("project_id", id.Project); err != nil {
			return fmt.Errorf("%w: agent identity: %w (e.g. demo)", ErrIdentity, err)
		}
		if id.Agent != "" {
			if err := subjects.ValidateToken("agent_id", id.Agent); err != nil {
				return fmt.Errorf("%w: agent identity: %w (e.g. demo/alice)", ErrIdentity, err)
			}
		}
		return nil
	case RoleWorker:
		if id.Service == "" || len(id.Tools) == 0 {
			return fmt.Errorf("%w: worker identity needs a service and its tools (e.g. worker reverse --tools reverse)", ErrIdentity)
		}
		for _, t := range id.Tools {
			if err := subjects.ValidateToken("tool target", strings.ReplaceAll(t.Target, ".", "_")); err != nil || t.Name == "" {
				return fmt.Errorf("%w: worker %s: tool %q target %q: want a tool name and a cmd.tool target", ErrIdentity, id.Service, t.Name, t.Target)
			}
		}
		for _, p := range id.Projects {
			if err := subjects.ValidateToken("project_id", p); err != nil {
				return fmt.Errorf("%w: worker %s: project %q: %w (e.g. --projects demo,ops)", ErrIdentity, id.Service, p, err)
			}
		}
		return nil
	}
	return fmt.Errorf("%w: unknown role %q (want %s, %s, %s, %s or %s)", ErrIdentity, id.Role, RoleCore, RoleAdmin, RoleOperator, RoleAgent, RoleWorker)
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
	// Written whole to a temporary file, then linked into place: a process
	// that makes the same identity at the same time (cluster nodes sharing
	// a credentials directory) never reads a half-written seed, and the
	// first link wins.
	f, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return "", false, fmt.Errorf("meshauth: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }()
	_, werr := f.Write(append(seed, '\n'))
	if err := errors.Join(werr, f.Chmod(0o600), f.Sync(), f.Close()); err != nil {
		return "", false, fmt.Errorf("meshauth: write %s: %w", path, err)
	}
	if err := os.Link(tmp, path); errors.Is(err, fs.ErrExist) {
		return Ensure(dir, name) // created concurrently: use that one
	} else if err != nil {
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
