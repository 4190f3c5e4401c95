// Package identity is the mesh's identity service: NATS identities added
// while the mesh runs (`utpmesh identity add|list|remove`), kept in a
// file under the data directory and admitted by a live reload of the
// embedded server's users — a new tool gets its own scoped identity
// without a restart.
//
// Requests go to cg.<ver>.<project>.<channel>.svc.identity.<op> (ops list,
// add, remove; the CLI uses project Project). Only the core, admin and
// operator identities may publish there (internal/meshauth); every change
// is an audit record (internal/audit). An added identity is a worker
// (a service and its tools, optionally limited to projects) or a
// per-agent identity (a project and an agent id); the request carries its
// public nkey only: the seed is made by the CLI and never sent.
//
// Caveat: the list is one node's. In a cluster every node keeps its own
// users; add the identity on each node (docs/operations.md).
package identity

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/utpmesh/utpmesh/internal/atomicfile"
	"github.com/utpmesh/utpmesh/internal/meshauth"
)

// ServiceName is the service token: svc.identity.<op>.
const ServiceName = meshauth.IdentityService

// Operations.
const (
	OpList   = "list"
	OpAdd    = "add"
	OpRemove = "remove"
)

// Project is the project token of the CLI's requests (the service is
// mesh-wide; any project's subject reaches it).
const Project = "_mesh"

// FileName is the identity list's file under the data directory.
const FileName = "identities.json"

// Errors of the service.
var (
	// ErrInvalid: the identity to add is malformed, of a role that cannot
	// be added, or has no public key; the message says what to pass.
	ErrInvalid = errors.New("identity: invalid")
	// ErrExists: an identity of that name, or one serving one of its
	// tools, exists already.
	ErrExists = errors.New("identity: exists")
	// ErrNotFound: no added identity has that name.
	ErrNotFound = errors.New("identity: not found")
)

// Store is the list of added identities, persisted as JSON in one file
// (written to a temporary file, synced and renamed).
type Store struct {
	path string
	mu   sync.Mutex
	ids  []meshauth.Identity
}

// OpenStore reads the list at path (none yet: empty).
func OpenStore(path string) (*Store, error) {
	s := &Store{path: path}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("identity: read %s: %w", path, err)
	}
	if err := json.Unmarshal(data, &s.ids); err != nil {
		return nil, fmt.Errorf("identity: %s is not an identity list: %w (restore it or remove it and add the identities again)", path, err)
	}
	for _, id := range s.ids {
		if err := id.Validate(); err != nil {
			return nil, fmt.Errorf("identity: %s: %s: %w", path, id.Name(), err)
		}
	}
	return s, nil
}

// List returns the added identities.
func (s *Store) List() []meshauth.Identity {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ids)
}

// Add appends id and writes the list; a name already listed is ErrExists.
func (s *Store) Add(id meshauth.Identity) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, have := range s.ids {
		if have.Name() == id.Name() {
			return fmt.Errorf("%w: %s (remove it first: utpmesh identity remove %s)", ErrExists, id.Name(), id.Name())
		}
	}
	next := append(slices.Clone(s.ids), id)
	if err := s.write(next); err != nil {
		return err
	}
	s.ids = next
	return nil
}

// Remove drops the identity named name and writes the list.
func (s *Store) Remove(name string) (meshauth.Identity, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.ids, func(id meshauth.Identity) bool { return id.Name() == name })
	if i < 0 {
		return meshauth.Identity{}, fmt.Errorf("%w: %q was not added with utpmesh identity add (utpmesh identity list shows those)", ErrNotFound, name)
	}
	gone := s.ids[i]
	next := slices.Delete(slices.Clone(s.ids), i, i+1)
	if err := s.write(next); err != nil {
		return meshauth.Identity{}, err
	}
	s.ids = next
	return gone, nil
}

func (s *Store) write(ids []meshauth.Identity) error {
	if ids == nil {
		ids = []meshauth.Identity{}
	}
	data, err := json.MarshalIndent(ids, "", "  ")
	if err != nil {
		return fmt.Errorf("identity: encode: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	if err := atomicfile.Write(s.path, data, 0o600); err != nil {
		return fmt.Errorf("identity: write %s: %w", s.path, err)
	}
	return nil
}
