package toolkit

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
)

// Late hands a mesh's NATS connection and CardStore to services built
// before the mesh started (utpmesh up binds them once the mesh is up);
// services wait for Set on first use.
type Late struct {
	once  sync.Once
	ready chan struct{}
	nc    *nats.Conn
	st    cardstore.Store
}

// NewLate returns an unset Late.
func NewLate() *Late { return &Late{ready: make(chan struct{})} }

// Set provides the connection and store (the first Set counts).
func (l *Late) Set(nc *nats.Conn, st cardstore.Store) {
	l.once.Do(func() { l.nc, l.st = nc, st; close(l.ready) })
}

// Resolve waits for Set or the end of ctx.
func (l *Late) Resolve(ctx context.Context) (*nats.Conn, cardstore.Store, error) {
	select {
	case <-l.ready:
		return l.nc, l.st, nil
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("waiting for the mesh to start: %w", ctx.Err())
	}
}

// Conn is Resolve without the store.
func (l *Late) Conn(ctx context.Context) (*nats.Conn, error) {
	nc, _, err := l.Resolve(ctx)
	return nc, err
}
