package mesh

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/worker"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/identity"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// identState is the mesh's live identity state: the identities added with
// `utpmesh identity add` (a file under the data directory), the
// projects' raw-command opt-ins, and what the server admits now.
type identState struct {
	mu       sync.Mutex // serializes reloads of the server's users
	store    *identity.Store
	raw      map[string]bool // SetRawCommands overrides
	admitted []meshauth.Identity
	amu      sync.Mutex // guards raw and admitted
}

var _ identity.Mesh = (*Mesh)(nil)

func (s *identState) setAdmitted(ids []meshauth.Identity) {
	s.amu.Lock()
	s.admitted = ids
	s.amu.Unlock()
}

// addedIdentities opens the identity list (once) and returns it.
func (m *Mesh) addedIdentities() ([]meshauth.Identity, error) {
	if m.idents.store == nil {
		st, err := identity.OpenStore(filepath.Join(m.cfg.DataDir, identity.FileName))
		if err != nil {
			return nil, fmt.Errorf("mesh: identities: %w", err)
		}
		m.idents.store = st
	}
	return m.idents.store.List(), nil
}

// rawCommands reports whether project's agent identities may publish raw
// commands: SetRawCommands (the project's config, loadRawCommands and
// followRawCommands), else IdentityConfig.RawCommands, else no.
func (m *Mesh) rawCommands(project string) bool {
	m.idents.amu.Lock()
	raw, ok := m.idents.raw[project]
	m.idents.amu.Unlock()
	if ok {
		return raw
	}
	if f := m.cfg.Identities.RawCommands; f != nil {
		return f(project)
	}
	return false
}

// loadRawCommands reads the raw-command opt-in of every project that has
// agent identities from the policy store, once the authz service runs,
// and reloads the server's users when one opted in (the identities were
// made before the store was open, with raw commands off).
func (m *Mesh) loadRawCommands(ctx context.Context) error {
	if m.cfg.Identities == nil || m.cfg.Identities.RawCommands != nil || m.policies == nil {
		return nil
	}
	seen, changed := map[string]bool{}, false
	for _, id := range m.Identities() {
		if id.Role != meshauth.RoleAgent || seen[id.Project] {
			continue
		}
		seen[id.Project] = true
		c, err := m.policies.Config(ctx, id.Project) // the defaults when the project has none
		if err != nil {
			return fmt.Errorf("mesh: read the commands mode of project %s: %w", id.Project, err)
		}
		if c.RawCommands() {
			m.cfg.Logger.Warn("project allows raw commands: its agents may publish tool commands the mesh did not admit (SDK workers gate them; foreign workers may not)", "project", id.Project)
			m.idents.amu.Lock()
			if m.idents.raw == nil {
				m.idents.raw = map[string]bool{}
			}
			m.idents.raw[id.Project] = true
			m.idents.amu.Unlock()
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return m.ReloadIdentities()
}

// followRawCommands is the authz service's OnConfig hook: a project's
// config change that switches its commands mode reloads its agents'
// permissions live.
func (m *Mesh) followRawCommands(project string, c authz.ProjectConfig) {
	if m.cfg.Identities == nil || m.cfg.Identities.RawCommands != nil {
		return
	}
	if m.rawCommands(project) == c.RawCommands() {
		return
	}
	if err := m.SetRawCommands(project, c.RawCommands()); err != nil {
		m.cfg.Logger.Error("cannot reload the agents' permissions after a commands-mode change", "project", project, "raw", c.RawCommands(), "err", err)
		return
	}
	m.cfg.Logger.Warn("commands mode changed: agents' NATS permissions reloaded", "project", project, "raw", c.RawCommands())
}

// SetRawCommands switches project's opt-in to raw commands and reloads
// the server's users: with raw false its agent identities may no longer
// publish on cmd.tool.* or cmd.sys.pmo.internal.* (they dispatch through
// the mesh); with true they may. The core calls it when a project's
// configuration changes. It needs Config.Identities.
func (m *Mesh) SetRawCommands(project string, raw bool) error {
	if m.cfg.Identities == nil {
		return errors.New("mesh: SetRawCommands needs Config.Identities (NATS authentication on)")
	}
	m.idents.amu.Lock()
	if m.idents.raw == nil {
		m.idents.raw = map[string]bool{}
	}
	m.idents.raw[project] = raw
	m.idents.amu.Unlock()
	return m.ReloadIdentities()
}

// Identities returns every identity the server admits now, with its
// public key (identity.Mesh).
func (m *Mesh) Identities() []meshauth.Identity {
	m.idents.amu.Lock()
	defer m.idents.amu.Unlock()
	return slices.Clone(m.idents.admitted)
}

// ReloadIdentities rebuilds the server's users from Config.Identities,
// the added identities and the raw-command opt-ins, with a live reload:
// connections of a removed identity are closed, the others get their new
// permissions (identity.Mesh).
func (m *Mesh) ReloadIdentities() error {
	if m.cfg.Identities == nil {
		return errors.New("mesh: ReloadIdentities needs Config.Identities (NATS authentication on)")
	}
	m.idents.mu.Lock()
	defer m.idents.mu.Unlock()
	return m.applyIdentitiesLocked()
}

// applyIdentitiesLocked gives the server the users of the identities as
// they are now; m.idents.mu is held.
func (m *Mesh) applyIdentitiesLocked() error {
	users, _, err := m.identities()
	if err != nil {
		return err
	}
	// The durables before the users: a worker or an agent that may
	// connect finds its durable made, as a pull consumer.
	if err := m.identityDurables(m.Identities()); err != nil {
		return err
	}
	return m.srv.SetUsers(users)
}

// durableAckWait is the ack wait of the durables the core makes for
// worker identities: the worker runtime's default (a worker may change it),
// so a dead worker's calls fail over in seconds (docs/performance.md).
const durableAckWait = worker.DefaultAckWait

// identityDurable is a durable the core makes for an identity.
type identityDurable struct {
	stream, name string
	filters      []string
	ackWait      time.Duration
	// keep: an existing durable with other filters is the identity's own
	// (an unlimited worker's, whose create permission is its tool's filter).
	keep bool
}

// durablesOf returns the durables the core makes for id: its tools'
// (meshauth.WorkerDurables) on the command stream, its wakeups'
// (meshauth.AgentDurables) on the wakeup stream.
func durablesOf(ver string, id meshauth.Identity) []identityDurable {
	var out []identityDurable
	for name, filters := range meshauth.WorkerDurables(ver, id) {
		out = append(out, identityDurable{stream: streams.CommandStream(ver), name: name, filters: filters, ackWait: durableAckWait, keep: len(id.Projects) == 0})
	}
	for name, filters := range meshauth.AgentDurables(ver, id) {
		out = append(out, identityDurable{stream: streams.WakeupStream(ver), name: name, filters: filters, ackWait: streams.WakeupAckWait})
	}
	return out
}

// identityDurables makes sure every tool of every worker identity and
// every agent identity has its durable as a pull consumer
// (meshauth.WorkerDurables, meshauth.AgentDurables): missing ones are
// created, a limited worker's and an agent's are set to the identity's
// filters, a push consumer in its place is an error saying what to do.
// Neither role may create a durable of its own (an agent none at all).
func (m *Mesh) identityDurables(ids []meshauth.Identity) error {
	js, err := jetstream.New(m.nc)
	if err != nil {
		return fmt.Errorf("mesh: jetstream: %w", err)
	}
	for _, id := range ids {
		for _, d := range durablesOf(m.cfg.ProtocolVersion, id) {
			// A push consumer is refused outright; the rest is retried
			// with the mesh's patience on replicated state (a cluster that
			// is still forming, a loaded machine), each attempt bounded.
			var refused error
			err := m.Patiently(context.Background(), "durable "+d.name, func(ctx context.Context) error {
				ctx, cancel := deadline.Bound(ctx, streams.Patience)
				defer cancel()
				cur, err := js.Consumer(ctx, d.stream, d.name)
				if errors.Is(err, jetstream.ErrNotPullConsumer) {
					refused = fmt.Errorf("mesh: durable %s of %s is a push consumer, which the mesh never makes for an identity: delete it (nats consumer rm %s %s) and start again",
						d.name, id.Name(), d.stream, d.name)
					return nil
				}
				if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
					return err
				}
				if err == nil {
					if have := cur.CachedInfo().Config; d.keep || slices.Equal(filtersOf(have), d.filters) {
						return nil // the identity's own (an admin may change its ack wait)
					}
				}
				_, err = js.CreateOrUpdateConsumer(ctx, d.stream, streams.ConsumerConfig(d.name, d.filters, d.ackWait, -1))
				return err
			})
			if err != nil {
				return fmt.Errorf("mesh: durable %s of %s (filters %s): %w", d.name, id.Name(), strings.Join(d.filters, ", "), err)
			}
			if refused != nil {
				return refused
			}
		}
	}
	return nil
}

// startIdentityService serves svc.identity.* (pkg/identity) when NATS
// authentication is on.
func (m *Mesh) startIdentityService() error {
	if m.cfg.Identities == nil {
		return nil
	}
	if _, err := m.addedIdentities(); err != nil {
		return err
	}
	srv, err := identity.NewServer(m.nc, m.idents.store, m, svc.ServerConfig{Version: m.cfg.ProtocolVersion,
		Logger: m.cfg.Logger.With("component", "identity")})
	if err != nil {
		return fmt.Errorf("mesh: identity service: %w", err)
	}
	m.push(srv.Stop)
	return m.identityDurables(m.Identities())
}

// filtersOf returns a consumer's filter subjects.
func filtersOf(c jetstream.ConsumerConfig) []string {
	if c.FilterSubject != "" {
		return []string{c.FilterSubject}
	}
	return c.FilterSubjects
}

// identities ensures the seed of every identity of Config.Identities and
// returns the server's users and the core's seed file.
func (m *Mesh) identities() ([]embednats.User, string, error) {
	ic := m.cfg.Identities
	dir := m.CredsDir()
	ids := []meshauth.Identity{{Role: meshauth.RoleCore}, {Role: meshauth.RoleAdmin}, {Role: meshauth.RoleOperator}}
	projects := ic.AgentProjects
	if len(projects) == 0 {
		projects = m.cfg.Projects
	}
	for _, p := range projects {
		ids = append(ids, meshauth.Identity{Role: meshauth.RoleAgent, Project: p})
	}
	ids = append(ids, ic.Workers...)
	added, err := m.addedIdentities()
	if err != nil {
		return nil, "", err
	}
	ids = append(ids, added...)
	var admitted []meshauth.Identity
	var users []embednats.User
	seen := map[string]bool{}
	for _, id := range ids {
		if err := id.Validate(); err != nil {
			return nil, "", fmt.Errorf("mesh: identities: %w", err)
		}
		name := id.Name()
		if seen[name] {
			return nil, "", fmt.Errorf("mesh: identities: %s is listed twice", name)
		}
		seen[name] = true
		pub := id.Key // identity add: the seed stays with its holder
		if pub == "" {
			var created bool
			if pub, created, err = meshauth.Ensure(dir, name); err != nil {
				return nil, "", err
			}
			if created {
				m.cfg.Logger.Debug("created NATS credentials", "identity", name, "file", creds.SeedPath(dir, name))
			}
		}
		id.Key = pub
		if id.Role == meshauth.RoleAgent {
			id.RawCommands = m.rawCommands(id.Project)
		}
		users = append(users, embednats.User{Nkey: pub, Name: name, Permissions: meshauth.Permissions(m.cfg.ProtocolVersion, id)})
		m.names.Store(pub, name)
		admitted = append(admitted, id)
	}
	m.idents.setAdmitted(admitted)
	return users, creds.SeedPath(dir, meshauth.RoleCore), nil
}

// identityNames resolves the public nkeys of the mesh's identities to
// their names, for the audit of signed requests; nil without identities.
func (m *Mesh) identityNames() func(pub string) (string, bool) {
	if m.cfg.Identities == nil {
		return nil
	}
	return func(pub string) (string, bool) {
		v, ok := m.names.Load(pub)
		name, _ := v.(string)
		return name, ok
	}
}

// AddIdentities admits more identities (e.g. worker identities for tool
// services built after the server started) with a live reload of the
// server's users. It needs Config.Identities.
func (m *Mesh) AddIdentities(ids ...meshauth.Identity) error {
	if m.cfg.Identities == nil {
		return errors.New("mesh: AddIdentities needs Config.Identities (NATS authentication on)")
	}
	m.idents.mu.Lock()
	defer m.idents.mu.Unlock()
	m.cfg.Identities.Workers = append(m.cfg.Identities.Workers, ids...)
	return m.applyIdentitiesLocked()
}

// CredsDir is where the identities' seed files live (Config.Identities).
func (m *Mesh) CredsDir() string {
	if m.cfg.Identities != nil && m.cfg.Identities.Dir != "" {
		return m.cfg.Identities.Dir
	}
	return filepath.Join(m.cfg.DataDir, "creds")
}

// CredsFile is the seed file of the identity named name (core, admin,
// agent-<project>, worker-<service>; see meshauth.Identity.Name).
func (m *Mesh) CredsFile(name string) string { return creds.SeedPath(m.CredsDir(), name) }
