package worker

import (
	"context"
	"sync"
	"time"

	"github.com/utpmesh/utpmesh/pkg/registry"
)

// cachedEntry is a registry entry with its compiled parameter schema.
type cachedEntry struct {
	entry   *registry.Entry
	schema  *registry.Schema
	fetched time.Time
}

// entryCache keeps registry entries and compiled schemas for ttl, so the hot
// path neither asks the registry nor compiles a schema per call.
type entryCache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]*cachedEntry
}

func (c *entryCache) get(ctx context.Context, reg registry.Registry, t *Tool, project string) (*cachedEntry, error) {
	key := project + "\x00" + t.Name
	c.mu.Lock()
	if e, ok := c.m[key]; ok && time.Since(e.fetched) < c.ttl {
		c.mu.Unlock()
		return e, nil
	}
	c.mu.Unlock()
	var ent *registry.Entry
	if t.Builtin {
		ent = t.Entry(project)
	} else {
		var err error
		if ent, err = reg.Get(ctx, project, t.Name); err != nil {
			return nil, err
		}
	}
	schema, err := registry.CompileSchema(ent.Parameters)
	if err != nil {
		return nil, err
	}
	e := &cachedEntry{entry: ent, schema: schema, fetched: time.Now()}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]*cachedEntry{}
	}
	c.m[key] = e
	c.mu.Unlock()
	return e, nil
}
