package objblob

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/services/state/blob"
)

// Lazy is a Store opened on first use, once its NATS connection is known
// (a service built before the mesh that serves it has started).
type Lazy struct {
	resolve func(ctx context.Context) (*nats.Conn, error)
	cfg     Config

	mu     sync.Mutex
	st     *Store
	closed bool
}

var _ blob.Store = (*Lazy)(nil)

// NewLazy returns a Store that resolves its connection and opens the
// bucket of cfg on first use; a failure fails that use, and the next use
// tries again.
func NewLazy(resolve func(ctx context.Context) (*nats.Conn, error), cfg Config) *Lazy {
	return &Lazy{resolve: resolve, cfg: cfg}
}

// Open opens the store now if it is not open yet.
func (l *Lazy) Open(ctx context.Context) (*Store, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, blob.ErrClosed
	}
	if l.st != nil {
		return l.st, nil
	}
	nc, err := l.resolve(ctx)
	if err != nil {
		return nil, fmt.Errorf("objblob: %w", err)
	}
	st, err := Open(ctx, nc, l.cfg)
	if err != nil {
		return nil, err
	}
	l.st = st
	return st, nil
}

// Put opens the store if needed and stores content (Store.Put).
func (l *Lazy) Put(ctx context.Context, name string, content []byte) error {
	st, err := l.Open(ctx)
	if err != nil {
		return err
	}
	return st.Put(ctx, name, content)
}

// Get opens the store if needed and reads name (Store.Get).
func (l *Lazy) Get(ctx context.Context, name string) ([]byte, error) {
	st, err := l.Open(ctx)
	if err != nil {
		return nil, err
	}
	return st.Get(ctx, name)
}

// Delete opens the store if needed and deletes name (Store.Delete).
func (l *Lazy) Delete(ctx context.Context, name string) error {
	st, err := l.Open(ctx)
	if err != nil {
		return err
	}
	return st.Delete(ctx, name)
}

// Close makes every later use fail with blob.ErrClosed.
func (l *Lazy) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.st != nil {
		return l.st.Close()
	}
	return nil
}
