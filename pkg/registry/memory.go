package registry

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// Memory is an in-memory Registry, for tests and single-process use. The
// zero value is not usable; call NewMemory.
type Memory struct {
	mu     sync.RWMutex
	clock  func() time.Time
	byKey  map[[2]string]*Entry
	closed bool
}

var _ Registry = (*Memory)(nil)

// NewMemory returns an empty in-memory registry. clock stamps UpdatedAt;
// nil means time.Now.
func NewMemory(clock func() time.Time) *Memory {
	if clock == nil {
		clock = time.Now
	}
	return &Memory{clock: clock, byKey: map[[2]string]*Entry{}}
}

// Close makes every later call fail with ErrClosed. It is idempotent.
func (m *Memory) Close() error {
	m.mu.Lock()
	m.closed = true
	m.byKey = nil
	m.mu.Unlock()
	return nil
}

// Put implements Registry.
func (m *Memory) Put(ctx context.Context, e *Entry) (*Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := Validate(e); err != nil {
		return nil, err
	}
	c := e.Clone()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	c.UpdatedAt = m.clock().UTC()
	m.byKey[[2]string{c.ProjectID, c.ToolName}] = c
	return c.Clone(), nil
}

// Get implements Registry.
func (m *Memory) Get(ctx context.Context, projectID, toolName string) (*Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckKey(projectID, toolName); err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, ErrClosed
	}
	e, ok := m.byKey[[2]string{projectID, toolName}]
	if !ok {
		return nil, NotFound(projectID, toolName)
	}
	return e.Clone(), nil
}

// List implements Registry.
func (m *Memory) List(ctx context.Context, projectID string) ([]*Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckProjectID(projectID); err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, ErrClosed
	}
	out := []*Entry{}
	for k, e := range m.byKey {
		if k[0] == projectID {
			out = append(out, e.Clone())
		}
	}
	slices.SortFunc(out, func(a, b *Entry) int { return cmp.Compare(a.ToolName, b.ToolName) })
	return out, nil
}

// Delete implements Registry.
func (m *Memory) Delete(ctx context.Context, projectID, toolName string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := CheckKey(projectID, toolName); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	k := [2]string{projectID, toolName}
	if _, ok := m.byKey[k]; !ok {
		return NotFound(projectID, toolName)
	}
	delete(m.byKey, k)
	return nil
}
