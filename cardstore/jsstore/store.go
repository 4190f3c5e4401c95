package jsstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// Errors of Open. Errors of the Store methods wrap the cardstore sentinels.
var (
	// ErrUnsupported: the server cannot hold the store: JetStream is off, or
	// the stream did not accept atomic batch publishing (nats-server 2.12
	// or later is needed).
	ErrUnsupported = errors.New("jsstore: server does not support the store")
	// ErrUnavailable: the stream did not answer (no JetStream leader, the
	// server is down); the request may be retried.
	ErrUnavailable = errors.New("jsstore: stream unavailable")
)

// Defaults of Config.
const (
	// DefaultStream is the stream name, and the first token of its subjects.
	DefaultStream = "utpmesh_cards"
	// DefaultRequestTimeout bounds one JetStream request when the caller's
	// context has no deadline.
	DefaultRequestTimeout = 10 * time.Second
	// DefaultAttemptTimeout bounds one attempt of a JetStream request: far
	// above a request's time on a loaded cluster (milliseconds; a batch
	// commit tens of them), and short enough that a request the stream
	// leader took with it when it died is sent again soon, to reach the
	// new leader as soon as one is elected (resend.go).
	DefaultAttemptTimeout = 2 * time.Second
	// DefaultMaxInflightBatches bounds the atomic batches one Store has
	// open at once; nats-server allows 50 per stream by default.
	DefaultMaxInflightBatches = 16
	// MaxReplicas is the largest replica count JetStream allows.
	MaxReplicas = 5
	// MaxBatchMessages is the most messages one Put writes in its atomic
	// batch: a card, a result index record and a claim tombstone per
	// tool.result, an index record, a summary and an agent list record per
	// turn, and one turn list record, for cardstore.MaxBatch cards. For
	// every Put to fit, nats-server's jetstream { limits { max_batch_size } }
	// must be at least this; its default, 1000, takes a Put of up to 996
	// cards of one turn, and a bigger Put fails with cardstore.ErrTooLarge.
	MaxBatchMessages = 6*cardstore.MaxBatch + 1
	// MaxPutBytes bounds the encoded cards of one Put: a Put is one atomic
	// batch, which the server stages whole before it commits it. (A Put
	// over NATS is bounded by the max payload, 8 MiB in `utpmesh up`.)
	MaxPutBytes = 64 << 20
)

// Config configures Open. The zero value is a single-replica store in the
// stream DefaultStream.
type Config struct {
	// Stream names the stream (and the first token of its subjects);
	// [A-Za-z0-9_-], default DefaultStream. Stores of different meshes on
	// one NATS system use different streams.
	Stream string
	// Replicas is the stream's replica count, 1 (default) to 5. Cluster
	// mode uses 3: every acknowledged write is then on a quorum of two
	// servers, and reads that must see the latest write go to the stream
	// leader (see the package documentation).
	Replicas int
	// MaxCardBytes lowers the limit on one card's canonical encoding
	// (default and maximum cardstore.DefaultMaxCardBytes).
	MaxCardBytes int
	// Clock judges lease expiry and stamps box times (default time.Now).
	// It is this process's clock: several Stores on one stream must have
	// clocks that agree to well within the shortest lease (NTP).
	Clock func() time.Time
	// RequestTimeout bounds each JetStream request made without a context
	// deadline (default DefaultRequestTimeout).
	RequestTimeout time.Duration
	// AttemptTimeout bounds one attempt of a request (default
	// DefaultAttemptTimeout): an attempt unanswered within it is sent
	// again, within the request's whole bound (the caller's deadline, or
	// RequestTimeout). See resend.go for why a write may be resent.
	AttemptTimeout time.Duration
	// MaxInflightBatches bounds the atomic batches this Store has open at
	// once (default DefaultMaxInflightBatches); more concurrent writers
	// wait for a slot.
	MaxInflightBatches int
	// Quorum tells whether the stream can have a leader now: nil, or an
	// error saying why not (the node lost its cluster's quorum). A leader
	// read answered "temporarily unavailable" (err_code 10008: the stream
	// is electing a leader) is asked again while Quorum returns nil,
	// within the read's bound, and fails at once otherwise. Nil: it fails
	// at once.
	Quorum func() error
}

// Store is a cardstore.Store kept in a JetStream stream. Create it with
// Open; every method is safe for concurrent use, and any number of Stores,
// in any processes, may share one stream.
type Store struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	cfg Config
	lay layout
	// leaderReads sends every read that must see the latest write to the
	// stream leader (replicated streams; see readLast).
	leaderReads bool
	// batches bounds the open atomic batches.
	batches chan struct{}

	// cm is the group committer of Put (commit.go).
	cm committer
	// beforeWrite, when set (tests only), runs between the planning of a
	// batch and its publication: the place where a concurrent writer
	// makes a compare-and-set fail.
	beforeWrite func()
	// beforeCommit, when set (tests only), runs in every attempt of a
	// write just before the message that commits it (a batch's last, or
	// the single record) is sent, with the attempt's context: where a
	// test kills the stream leader. An error ends the attempt unsent.
	beforeCommit func(ctx context.Context, msgs []*nats.Msg) error
	// dropAck, when set (tests only), makes an attempt whose
	// acknowledgement arrived behave as if it had been lost when it
	// returns true (acked).
	dropAck func(msgs []*nats.Msg) bool

	// mu guards closed; every method holds it for reading while it runs,
	// so Close waits for them.
	mu     sync.RWMutex
	closed bool
}

var _ cardstore.Store = (*Store)(nil)

// Open creates or updates the store's stream on the JetStream system nc is
// connected to, and returns a Store on it. It does not take nc over: the
// caller closes nc after Close.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Store, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if nc == nil {
		return nil, cardstore.Invalid("jsstore.Open: a NATS connection is required")
	}
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	if err := card.ValidateName("stream", cfg.Stream); err != nil {
		return nil, fmt.Errorf("%w: jsstore.Open: Config.Stream: %w (use letters, digits, '-' and '_')", cardstore.ErrInvalid, err)
	}
	switch {
	case cfg.Replicas == 0:
		cfg.Replicas = 1
	case cfg.Replicas < 0 || cfg.Replicas > MaxReplicas:
		return nil, cardstore.Invalid("jsstore.Open: Config.Replicas %d: use 1 (one server) to %d; cluster mode uses 3", cfg.Replicas, MaxReplicas)
	}
	switch {
	case cfg.MaxCardBytes == 0:
		cfg.MaxCardBytes = cardstore.DefaultMaxCardBytes
	case cfg.MaxCardBytes < 0 || cfg.MaxCardBytes > cardstore.DefaultMaxCardBytes:
		return nil, cardstore.Invalid("jsstore.Open: Config.MaxCardBytes %d: must be between 1 and %d", cfg.MaxCardBytes, cardstore.DefaultMaxCardBytes)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	switch {
	case cfg.RequestTimeout == 0:
		cfg.RequestTimeout = DefaultRequestTimeout
	case cfg.RequestTimeout < 0:
		return nil, cardstore.Invalid("jsstore.Open: Config.RequestTimeout %v is negative", cfg.RequestTimeout)
	}
	switch {
	case cfg.AttemptTimeout == 0:
		cfg.AttemptTimeout = DefaultAttemptTimeout
	case cfg.AttemptTimeout < 0:
		return nil, cardstore.Invalid("jsstore.Open: Config.AttemptTimeout %v is negative; use a positive duration, or 0 for the default %v", cfg.AttemptTimeout, DefaultAttemptTimeout)
	}
	switch {
	case cfg.MaxInflightBatches == 0:
		cfg.MaxInflightBatches = DefaultMaxInflightBatches
	case cfg.MaxInflightBatches < 0:
		return nil, cardstore.Invalid("jsstore.Open: Config.MaxInflightBatches %d is negative", cfg.MaxInflightBatches)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jsstore: %w", err)
	}
	s := &Store{
		nc: nc, js: js, cfg: cfg, lay: layout{root: cfg.Stream},
		leaderReads: cfg.Replicas > 1,
		batches:     make(chan struct{}, cfg.MaxInflightBatches),
	}
	if err := s.ensureStream(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// StreamConfig returns the configuration Open gives the stream: an
// operator who creates the stream by hand (nats stream add) must match it.
func StreamConfig(name string, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        name,
		Description: "utpmesh CardStore (cardstore/jsstore): cards, turn indexes, results, claims, boxes",
		Subjects:    []string{name + ".>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		Replicas:    replicas,
		// Reads of single messages and batches without the JetStream API
		// round trip; see readLast for when they go to the leader instead.
		AllowDirect: true,
		// Mutable records (summaries, claims, boxes) keep only their latest
		// version.
		AllowRollup: true,
		// A Put's messages are one atomic batch.
		AllowAtomicPublish: true,
	}
}

// ensureStream creates the stream or brings its configuration up to date.
func (s *Store) ensureStream(ctx context.Context) error {
	ctx, cancel := s.reqCtx(ctx)
	defer cancel()
	st, err := s.js.CreateOrUpdateStream(ctx, StreamConfig(s.cfg.Stream, s.cfg.Replicas))
	if err != nil {
		switch {
		case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount),
			errors.Is(err, nats.ErrNoResponders):
			return fmt.Errorf("%w: no JetStream answered: %w (start nats-server with JetStream: -js, or jetstream {} in its configuration)", ErrUnsupported, err)
		case s.cfg.Replicas > 1 && noPeers(err):
			// Too few servers online for the replicas right now: a cluster
			// still forming, or a peer that missed heartbeats on a loaded
			// machine, as well as a cluster that is too small.
			return fmt.Errorf("%w: create stream %s with %d replicas: %w (a replicated stream needs %d JetStream servers online in one cluster; retry once they are)", ErrUnavailable, s.cfg.Stream, s.cfg.Replicas, err, s.cfg.Replicas)
		case s.cfg.Replicas > 1:
			return fmt.Errorf("jsstore: create stream %s with %d replicas: %w (a replicated stream needs a JetStream cluster of at least %d servers)", s.cfg.Stream, s.cfg.Replicas, err, s.cfg.Replicas)
		}
		return fmt.Errorf("jsstore: create stream %s: %w", s.cfg.Stream, err)
	}
	if c := st.CachedInfo().Config; !c.AllowAtomicPublish || !c.AllowRollup || !c.AllowDirect {
		return fmt.Errorf("%w: stream %s came back without atomic publish, rollup or direct get (allow_atomic %v, allow_rollup_hdrs %v, allow_direct %v); nats-server 2.12 or later is needed",
			ErrUnsupported, s.cfg.Stream, c.AllowAtomicPublish, c.AllowRollup, c.AllowDirect)
	}
	// A replicated stream just created may have no leader yet: a write
	// then finds no responder. Return once one is elected, so the first
	// Put after Open does not fail with ErrUnavailable.
	for st.CachedInfo().Cluster != nil && st.CachedInfo().Cluster.Leader == "" {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: stream %s has no leader yet: %w", ErrUnavailable, s.cfg.Stream, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if _, err := st.Info(ctx); err != nil {
			return fmt.Errorf("%w: stream %s: %w", ErrUnavailable, s.cfg.Stream, err)
		}
	}
	return nil
}

// noPeers reports JetStream's refusal to place a stream's replicas: not
// enough servers online.
func noPeers(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeNoPeers
}

// Close ends the Store: it waits for the methods running, and later calls
// fail with cardstore.ErrClosed. Everything acknowledged is already in the
// stream; Close writes nothing. It does not close the NATS connection. It
// is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

// enter is the first thing every method does after checking its context:
// it fails once the store is closed and otherwise holds off Close until
// the returned function runs.
func (s *Store) enter() (func(), error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, cardstore.ErrClosed
	}
	return s.mu.RUnlock, nil
}

// reqCtx gives a context without a deadline the request timeout.
func (s *Store) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.cfg.RequestTimeout)
}

// checkCtx is the first thing every method does.
func checkCtx(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: context is nil", cardstore.ErrInvalid)
	}
	return ctx.Err()
}
