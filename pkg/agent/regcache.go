package agent

import (
	"context"
	"sync"
	"time"

	"github.com/utpmesh/utpmesh/pkg/registry"
)

// DefaultRegistryCacheTTL is how long a Client reuses a registry entry by
// default (the worker's entry cache uses the same).
const DefaultRegistryCacheTTL = 5 * time.Second

// entryCache keeps the registry entries Call looks up, so the hot path does
// not ask the registry once per call. The registry announces no changes, so
// an entry is reused for ttl and then read again: a tool re-registered
// with another target subject or after_execution is seen at most ttl
// later. Lookups that fail (an unknown tool) are not cached, so a tool
// registered after a failed Call is found at once. ttl <= 0 disables it.
type entryCache struct {
	ttl time.Duration
	now func() time.Time
	mu  sync.Mutex
	m   map[string]cachedEntry
}

type cachedEntry struct {
	entry   *registry.Entry
	fetched time.Time
}

// get returns project's entry of tool from the cache or from reg. The
// entry returned is shared: callers must not modify it.
func (c *entryCache) get(ctx context.Context, reg registry.Registry, project, tool string) (*registry.Entry, error) {
	if c.ttl <= 0 {
		return reg.Get(ctx, project, tool)
	}
	c.mu.Lock()
	if e, ok := c.m[tool]; ok && c.now().Sub(e.fetched) < c.ttl {
		c.mu.Unlock()
		return e.entry, nil
	}
	c.mu.Unlock()
	ent, err := reg.Get(ctx, project, tool)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]cachedEntry{}
	}
	c.m[tool] = cachedEntry{entry: ent, fetched: c.now()}
	c.mu.Unlock()
	return ent, nil
}
