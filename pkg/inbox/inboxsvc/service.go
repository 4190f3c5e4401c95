package inboxsvc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/telemetry"
	"github.com/utpmesh/utpmesh/subjects"
)

// Defaults of Config.
const (
	DefaultConcurrency = 32
	DefaultAckWait     = 30 * time.Second
)

// Config configures a Service.
type Config struct {
	// Version is the protocol version token; default subjects.DefaultVersion.
	Version string
	// Store is the CardStore the pointed tool.result cards are checked in.
	// Required.
	Store cardstore.Store
	// Backend keeps the entries: a boltinbox.DB (single node) or a
	// kvinbox.KV (cluster mode, where the bucket is replicated and any
	// number of inbox processes share it). Required. The caller owns it:
	// it opens the backend before New and closes it after Stop (Close
	// writes what is still queued: wakeup marks, lazy acks).
	Backend inbox.Backend
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Concurrency bounds the reports handled at once; default 32.
	Concurrency int
	// AckWait is the consumer's ack wait; default 30s. A report not
	// acknowledged within it is redelivered.
	AckWait time.Duration
	// Observer receives report outcomes and wakeup lags for metrics; nil
	// records nothing.
	Observer Observer
	// TracerProvider makes the utp.wakeup span of every report (see
	// pkg/telemetry); nil traces nothing.
	TracerProvider trace.TracerProvider
	// RingMarkedSince, when not zero, makes the start's ring (bbolt
	// backend) also ring the pending entries whose wakeup was marked sent
	// at or after it: on a wakeup stream that acknowledges before its
	// fsync (streams.WithAsyncPersist) a crash can lose wakeups whose
	// marks were committed. pkg/mesh sets it from the stream's last stored
	// wakeup. A wakeup rung twice is harmless (the agent's ack makes the
	// second a no-op).
	RingMarkedSince time.Time
}

// Service is the inbox: it consumes reports, keeps entries in its
// Config.Backend, rings agents' wakeups and serves the svc operations.
// Create it with New, then Start; Stop releases everything but the
// backend, which the caller closes. The local methods (List, Get, Ack,
// SetEpoch, Pending) work between New and Stop, started or not, and fail
// with inbox.ErrClosed after Stop.
type Service struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	cfg Config
	log *slog.Logger
	st  inbox.Backend
	tr  trace.Tracer
	// closed is set once Stop has finished: the local methods then fail
	// with inbox.ErrClosed, as they did when the service closed the
	// backend itself, whatever the caller does with the backend.
	closed atomic.Bool

	// mu guards started, stopping, cc, srv and the Add side of wg.
	mu       sync.Mutex
	started  bool
	stopping bool
	cc       jetstream.ConsumeContext
	srv      *svc.Server
	wg       sync.WaitGroup
	sem      chan struct{}
	stopCh   chan struct{}

	// baseCtx is the parent of every report handler's context; cancel ends
	// the handlers still running when Stop's context expires.
	baseCtx context.Context
	cancel  context.CancelFunc

	stopOnce sync.Once
	stopErr  error

	// fmu guards flights: the wakeups being published, by entry (ring.go).
	fmu     sync.Mutex
	flights map[string]*flight

	// rung is closed once the start's ringing of unmarked entries has
	// ended (at once for a backend without it; doorbell.go).
	rung chan struct{}
}

// New validates cfg. It neither opens the backend (the caller has) nor
// touches NATS until Start.
func New(nc *nats.Conn, cfg Config) (*Service, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: inboxsvc.New: nil NATS connection", inbox.ErrInvalid)
	}
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: inboxsvc.New: Config.Store is required", inbox.ErrInvalid)
	}
	if cfg.Backend == nil {
		return nil, fmt.Errorf("%w: inboxsvc.New: Config.Backend is required", inbox.ErrInvalid)
	}
	if cfg.Version == "" {
		cfg.Version = subjects.DefaultVersion
	}
	if err := subjects.ValidateToken("version", cfg.Version); err != nil {
		return nil, fmt.Errorf("%w: inboxsvc.New: Config.Version: %v", inbox.ErrInvalid, err)
	}
	if cfg.Concurrency < 0 || cfg.AckWait < 0 {
		return nil, fmt.Errorf("%w: inboxsvc.New: Concurrency (%d) and AckWait (%v) must not be negative",
			inbox.ErrInvalid, cfg.Concurrency, cfg.AckWait)
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = DefaultAckWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("inbox: jetstream: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{
		nc: nc, js: js, cfg: cfg, st: cfg.Backend,
		log:     cfg.Logger.With("component", "inbox"),
		tr:      telemetry.Tracer(cfg.TracerProvider),
		sem:     make(chan struct{}, cfg.Concurrency),
		stopCh:  make(chan struct{}),
		baseCtx: ctx, cancel: cancel,
		flights: map[string]*flight{},
		rung:    make(chan struct{}),
	}, nil
}

// Start ensures the durable consumer streams.InboxConsumer on the command
// stream (which must exist: see streams.Ensure), starts consuming reports
// and starts serving the svc operations; with a bbolt backend it then
// rings, in the background, the wakeup of every pending entry stored
// before the start without a wakeup-sent mark (ringUnrung). Start may be
// called once.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return fmt.Errorf("inbox: Start after Stop: %w", inbox.ErrClosed)
	}
	if s.started {
		return errors.New("inbox: already started")
	}
	since := time.Now()
	filter, err := subjects.InboxReportPattern(s.cfg.Version)
	if err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	// MaxDeliver -1: a report is retried while the store is unavailable;
	// every permanent problem is dead-lettered and terminated instead.
	ccfg := streams.ConsumerConfig(streams.InboxConsumer, []string{filter}, s.cfg.AckWait, -1)
	cons, err := streams.EnsureConsumer(ctx, s.js, s.cfg.Version, ccfg)
	if err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	srv, err := svc.NewServer(s.nc, svc.Config{
		Service: inbox.ServiceName, Version: s.cfg.Version, Codes: inbox.Codes, Logger: s.cfg.Logger,
	})
	if err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	for op, h := range map[string]svc.HandlerFunc{
		inbox.OpList: s.handleList, inbox.OpGet: s.handleGet, inbox.OpAck: s.handleAck, inbox.OpSetEpoch: s.handleSetEpoch,
		inbox.OpDeleteTurn: s.handleDeleteTurn,
		inbox.OpReport:     s.handleReportOp,
	} {
		if err := srv.Handle(op, h); err != nil {
			return fmt.Errorf("inbox: %w", err)
		}
	}
	// The agent-scoped operations, cg.<ver>.*.*.svc.inbox.<op>.<agent>.
	if err := srv.HandleTools(func(ctx context.Context, ts subjects.ToolSubject, data []byte) (any, error) {
		return s.handleAgent(ctx, srv, ts, data)
	}); err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	if err := srv.Start(); err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	cc, err := cons.Consume(s.onMessage,
		jetstream.PullMaxMessages(s.cfg.Concurrency),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			s.log.Debug("inbox: consume", "err", err)
		}))
	if err != nil {
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Stop(stopCtx)
		return fmt.Errorf("inbox: consume %s: %w", streams.InboxConsumer, err)
	}
	s.srv, s.cc, s.started = srv, cc, true
	s.startRinging(since)
	s.log.Info("inbox: started", "filter", filter, "consumer", streams.InboxConsumer,
		"service", srv.Subject(), "backend", fmt.Sprintf("%T", s.st), "concurrency", s.cfg.Concurrency)
	return nil
}

// onMessage is the Consume callback: it waits for a free handler slot (so
// at most Concurrency reports are in flight) and hands the report over.
func (s *Service) onMessage(m jetstream.Msg) {
	select {
	case s.sem <- struct{}{}:
	case <-s.stopCh:
		_ = m.Nak() // stopping: let another process (or our restart) have it
		return
	}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		<-s.sem
		_ = m.Nak()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer func() { <-s.sem; s.wg.Done() }()
		s.handleReport(m)
	}()
}

// Stop stops fetching reports, waits (until ctx ends) for the reports and
// requests in flight and stops the svc operations; it leaves the backend
// open for the caller to close.
// Reports still unfinished when ctx ends see their context canceled and
// are redelivered later. Stop is idempotent: every call returns the first
// call's result.
func (s *Service) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.stop(ctx) })
	return s.stopErr
}

func (s *Service) stop(ctx context.Context) error {
	s.mu.Lock()
	s.stopping = true
	close(s.stopCh)
	cc, srv := s.cc, s.srv
	s.mu.Unlock()

	var errs []error
	if cc != nil {
		cc.Stop()
		select {
		case <-cc.Closed():
		case <-ctx.Done():
		}
	}
	if srv != nil {
		if err := srv.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.cancel()
		grace := time.NewTimer(svc.CancelGrace)
		select {
		case <-done:
		case <-grace.C: // stuck (a store call that never returns): do not wait for it
		}
		grace.Stop()
		errs = append(errs, fmt.Errorf("inbox: stopped with reports in flight (they will be redelivered): %w", ctx.Err()))
	}
	s.cancel()
	s.closed.Store(true)
	s.log.Info("inbox: stopped")
	return errors.Join(errs...)
}

// backend returns the backend for a local method, or inbox.ErrClosed once
// Stop has finished.
func (s *Service) backend() (inbox.Backend, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("inbox: service stopped: %w", inbox.ErrClosed)
	}
	return s.st, nil
}
