package kit

import (
	"context"
	"fmt"
	"sync"

	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
)

// lazyKV opens the group's KV state once NATS is known: at New when
// Deps.NC is set (so a bad configuration fails the start), else on first
// use.
type lazyKV struct {
	deps  atlas.Deps
	group string
	cfg   kvstate.Config

	mu     sync.Mutex
	st     *kvstate.Store
	closed bool
}

var _ state.Store = (*lazyKV)(nil)

func (l *lazyKV) open(ctx context.Context) (*kvstate.Store, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, state.ErrClosed
	}
	if l.st != nil {
		return l.st, nil
	}
	nc, cards, err := l.deps.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("atlas state: %w", err)
	}
	// A local holder refuses this worker before it touches the bucket
	// (which a worker identity cannot create).
	if err := probeLocal(ctx, cards, l.group); err != nil {
		return nil, err
	}
	st, err := kvstate.Open(ctx, nc, l.cfg)
	if err != nil {
		return nil, err
	}
	if err := checkShared(ctx, cards, l.group, st); err != nil {
		return nil, err
	}
	l.st = st
	return st, nil
}

// openNow opens the store at once (bounded by a timeout).
func (l *lazyKV) openNow() error {
	ctx, cancel := context.WithTimeout(context.Background(), holderStart)
	defer cancel()
	_, err := l.open(ctx)
	return err
}

func (l *lazyKV) View(ctx context.Context, fn func(state.Tx) error) error {
	st, err := l.open(ctx)
	if err != nil {
		return err
	}
	return st.View(ctx, fn)
}

func (l *lazyKV) Update(ctx context.Context, fn func(state.Tx) error) error {
	st, err := l.open(ctx)
	if err != nil {
		return err
	}
	return st.Update(ctx, fn)
}

func (l *lazyKV) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return nil
}
