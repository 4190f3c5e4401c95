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

	"github.com/nats-io/nats.go/jetstream"

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
// commands: SetRawCommands, else IdentityConfig.RawCommands, else yes.
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
	return true
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
	users, _, err := m.identities()
	if err != nil {
		return err
	}
	if err := m.srv.SetUsers(users); err != nil {
		return err
	}
	return m.limitDurables()
}

// limitedAckWait is the ack wait of the durables the core makes for
// workers limited to projects: the worker runtime's default.
const limitedAckWait = 30 * time.Second

// limitDurables creates (or narrows) the durable of every tool of a
// worker identity limited to projects, with one filter per project
// (meshauth.LimitedDurables): such a worker may only bind it.
func (m *Mesh) limitDurables() error {
	ctx, cancel := context.WithTimeout(context.Background(), streams.Patience)
	defer cancel()
	js, err := jetstream.New(m.nc)
	if err != nil {
		return fmt.Errorf("mesh: jetstream: %w", err)
	}
	for _, id := range m.Identities() {
		for durable, filters := range meshauth.LimitedDurables(m.cfg.ProtocolVersion, id) {
			cfg := streams.ConsumerConfig(durable, filters, limitedAckWait, -1)
			if _, err := js.CreateOrUpdateConsumer(ctx, streams.CommandStream(m.cfg.ProtocolVersion), cfg); err != nil {
				return fmt.Errorf("mesh: durable %s of %s (projects %s): %w", durable, id.Name(), strings.Join(id.Projects, ","), err)
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
	return m.limitDurables()
}
