package authz

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"
)

// MemoryStore is an in-memory PolicyStore for tests, benchmarks and
// embedders that keep policies elsewhere.
type MemoryStore struct {
	mu      sync.RWMutex
	docs    map[string]*PolicyDoc
	configs map[string]ProjectConfig
}

var _ PolicyStore = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{docs: map[string]*PolicyDoc{}, configs: map[string]ProjectConfig{}}
}

// Policies implements PolicySource.
func (s *MemoryStore) Policies(ctx context.Context, project string) (*PolicyDoc, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	d, ok := s.docs[project]
	if !ok {
		return nil, fmt.Errorf("%w: project %s has no policy set", ErrNotFound, project)
	}
	cp := *d
	return &cp, nil
}

// Config implements PolicySource.
func (s *MemoryStore) Config(ctx context.Context, project string) (ProjectConfig, error) {
	if err := ctx.Err(); err != nil {
		return ProjectConfig{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	c := s.configs[project]
	if c.Mandate == "" {
		c.Mandate = MandateRequired
	}
	return c, nil
}

// PutPolicies implements PolicyStore.
func (s *MemoryStore) PutPolicies(ctx context.Context, project, text string) (*PolicyDoc, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, err := ParseAndValidate("policies", text); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(text))
	s.mu.Lock()
	defer s.mu.Unlock()
	d := &PolicyDoc{Project: project, Policies: text, SHA256: hex.EncodeToString(sum[:]), UpdatedAt: time.Now().UTC()}
	if old, ok := s.docs[project]; ok {
		d.Version = old.Version
	}
	d.Version++
	s.docs[project] = d
	cp := *d
	return &cp, nil
}

// PutConfig implements PolicyStore.
func (s *MemoryStore) PutConfig(ctx context.Context, project string, c ProjectConfig) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := c.Check(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.configs[project] = c
	return nil
}
