package kvstate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/services/state"
)

// ModeKey is the key of a bucket that records the state mode of the
// service owning it: state.ModeJetStream once a worker (or the core's
// Provision) used the bucket. It is one token, so no project key
// (<project>.<bucket>.<key>) or version key (<project>._v) can be it.
const ModeKey = "_mode"

// MarkShared records in the bucket that the service keeps its state there
// (ModeKey = state.ModeJetStream), unless it is recorded already. A
// worker of the local mode reads it (Mode) and refuses to start.
func (s *Store) MarkShared(ctx context.Context) error {
	ctx, cancel := deadline.Within(ctx, markPatience)
	defer cancel()
	// A node restarting right after its own loss finds the bucket
	// electing a leader ("no response from stream"): the record is a
	// create, so a copy is harmless (ErrKeyExists is success); wait the
	// election out instead of failing the worker's start.
	err := deadline.Patiently(ctx, markPatience, deadline.Electing, func(ctx context.Context) error {
		_, err := s.kv.Create(ctx, ModeKey, []byte(state.ModeJetStream))
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("kvstate: %s: record the state mode: %w", s.cfg.Bucket, err)
	}
	return nil
}

// markPatience bounds MarkShared: longer than a bucket's election on a
// loaded machine (up to 14 s measured, docs/cluster.md).
const markPatience = 30 * time.Second

// Mode returns the state mode recorded in bucket (see ModeKey): "" when
// the bucket or the record does not exist. It creates nothing.
func Mode(ctx context.Context, nc *nats.Conn, bucket string) (string, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	ctx, cancel := deadline.Within(ctx, 0)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("kvstate: bucket %s: %w", bucket, err)
	}
	e, err := kv.Get(ctx, ModeKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("kvstate: %s: read the state mode: %w", bucket, err)
	}
	return string(e.Value()), nil
}

// Provision creates (or configures) the bucket of cfg with the mesh
// core's connection and records the replicated mode in it: worker
// identities manage no stream (PublishSubjects).
func Provision(ctx context.Context, nc *nats.Conn, cfg Config) error {
	s, err := Open(ctx, nc, cfg)
	if err != nil {
		return err
	}
	return s.MarkShared(ctx)
}

// Lazy is a Store opened on first use, once its NATS connection is known
// (a service built before the mesh that serves it has started).
type Lazy struct {
	resolve func(ctx context.Context) (*nats.Conn, error)
	cfg     Config
	onOpen  func(ctx context.Context, s *Store) error

	mu     sync.Mutex
	st     *Store
	closed bool
}

var _ state.Store = (*Lazy)(nil)

// NewLazy returns a Store that resolves its connection and opens the
// bucket of cfg on first use, then runs onOpen (nil: nothing) once; an
// error of either fails that use, and the next use tries again.
func NewLazy(resolve func(ctx context.Context) (*nats.Conn, error), cfg Config, onOpen func(ctx context.Context, s *Store) error) *Lazy {
	return &Lazy{resolve: resolve, cfg: cfg, onOpen: onOpen}
}

// Open opens the store now if it is not open yet, waiting at most
// timeout (0: without a bound of its own).
func (l *Lazy) Open(ctx context.Context, timeout time.Duration) (*Store, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, state.ErrClosed
	}
	if l.st != nil {
		return l.st, nil
	}
	nc, err := l.resolve(ctx)
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	st, err := Open(ctx, nc, l.cfg)
	if err != nil {
		return nil, err
	}
	if l.onOpen != nil {
		if err := l.onOpen(ctx, st); err != nil {
			return nil, err
		}
	}
	l.st = st
	return st, nil
}

// View opens the store if needed and runs fn (Store.View).
func (l *Lazy) View(ctx context.Context, fn func(state.Tx) error) error {
	st, err := l.Open(ctx, 0)
	if err != nil {
		return err
	}
	return st.View(ctx, fn)
}

// Update opens the store if needed and runs fn (Store.Update).
func (l *Lazy) Update(ctx context.Context, fn func(state.Tx) error) error {
	st, err := l.Open(ctx, 0)
	if err != nil {
		return err
	}
	return st.Update(ctx, fn)
}

// Close makes every later use fail with state.ErrClosed.
func (l *Lazy) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return nil
}
