package inboxsvc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"
	"go.opentelemetry.io/otel/trace"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/jskv"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/boltinbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/kvinbox"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/telemetry"
	"github.com/utpmesh/utpmesh/subjects"
)

// Defaults of Config.
const (
	DefaultConcurrency = 32
	DefaultAckWait     = 30 * time.Second
	DefaultOpenTimeout = 5 * time.Second
)

// Config configures a Service.
type Config struct {
	// Version is the protocol version token; default subjects.DefaultVersion.
	Version string
	// Store is the CardStore the pointed tool.result cards are checked in.
	// Required.
	Store cardstore.Store
	// Path is the inbox's bbolt file (created, mode 0600, if missing).
	// Required unless Bucket is set.
	Path string
	// Bucket, when set, keeps the entries in this JetStream key-value
	// bucket (see kvinbox.OpenBucket) instead of a file: cluster mode, where the
	// bucket is replicated (R3) and any number of inbox processes share it.
	Bucket *jskv.Bucket
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Concurrency bounds the reports handled at once; default 32.
	Concurrency int
	// AckWait is the consumer's ack wait; default 30s. A report not
	// acknowledged within it is redelivered.
	AckWait time.Duration
	// OpenTimeout bounds the wait for the file lock of Path; default 5s.
	OpenTimeout time.Duration
	// Observer receives report outcomes and wakeup lags for metrics; nil
	// records nothing.
	Observer Observer
	// TracerProvider makes the utp.wakeup span of every report (see
	// pkg/telemetry); nil traces nothing.
	TracerProvider trace.TracerProvider
}

// Service is the inbox: it consumes reports, keeps entries (boltinbox or
// kvinbox), rings
// agents' wakeups and serves the svc operations. Create it with New, then
// Start; Stop releases everything. The local methods (List, Get, Ack,
// SetEpoch) work between New and Stop, started or not.
type Service struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	cfg Config
	log *slog.Logger
	st  inbox.Backend
	db  *boltinbox.DB // the bbolt backend, nil with Config.Bucket
	tr  trace.Tracer

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
}

// New validates cfg and opens the backend: the bucket of Config.Bucket
// (kvinbox), or the file of Config.Path (boltinbox; another process
// holding it makes New fail with boltinbox.ErrLocked after
// Config.OpenTimeout). It does not touch NATS until Start.
func New(nc *nats.Conn, cfg Config) (*Service, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: inboxsvc.New: nil NATS connection", inbox.ErrInvalid)
	}
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: inboxsvc.New: Config.Store is required", inbox.ErrInvalid)
	}
	if cfg.Path == "" && cfg.Bucket == nil {
		return nil, fmt.Errorf("%w: inboxsvc.New: Config.Path (the inbox.db file) or Config.Bucket is required", inbox.ErrInvalid)
	}
	if cfg.Version == "" {
		cfg.Version = subjects.DefaultVersion
	}
	if err := subjects.ValidateToken("version", cfg.Version); err != nil {
		return nil, fmt.Errorf("%w: inboxsvc.New: Config.Version: %v", inbox.ErrInvalid, err)
	}
	if cfg.Concurrency < 0 || cfg.AckWait < 0 || cfg.OpenTimeout < 0 {
		return nil, fmt.Errorf("%w: inboxsvc.New: Concurrency (%d), AckWait (%v) and OpenTimeout (%v) must not be negative",
			inbox.ErrInvalid, cfg.Concurrency, cfg.AckWait, cfg.OpenTimeout)
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = DefaultAckWait
	}
	if cfg.OpenTimeout == 0 {
		cfg.OpenTimeout = DefaultOpenTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("inbox: jetstream: %w", err)
	}
	var (
		d  *boltinbox.DB
		st inbox.Backend
	)
	if cfg.Bucket != nil {
		st = kvinbox.New(cfg.Bucket)
	} else {
		if d, err = boltinbox.Open(cfg.Path, cfg.OpenTimeout); err != nil {
			return nil, err
		}
		st = d
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{
		nc: nc, js: js, cfg: cfg, db: d, st: st,
		log:     cfg.Logger.With("component", "inbox"),
		tr:      telemetry.Tracer(cfg.TracerProvider),
		sem:     make(chan struct{}, cfg.Concurrency),
		stopCh:  make(chan struct{}),
		baseCtx: ctx, cancel: cancel,
	}, nil
}

// Start ensures the durable consumer streams.InboxConsumer on the command
// stream (which must exist: see streams.Ensure), starts consuming reports
// and starts serving the svc operations. Start may be called once.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return fmt.Errorf("inbox: Start after Stop: %w", inbox.ErrClosed)
	}
	if s.started {
		return errors.New("inbox: already started")
	}
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
		inbox.OpReport: s.handleReportOp,
	} {
		if err := srv.Handle(op, h); err != nil {
			return fmt.Errorf("inbox: %w", err)
		}
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
	s.log.Info("inbox: started", "filter", filter, "consumer", streams.InboxConsumer,
		"service", srv.Subject(), "path", s.cfg.Path, "replicated", s.cfg.Bucket != nil, "concurrency", s.cfg.Concurrency)
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
// requests in flight, stops the svc operations and closes the inbox file.
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
		<-done
		errs = append(errs, fmt.Errorf("inbox: stopped with reports in flight (they will be redelivered): %w", ctx.Err()))
	}
	s.cancel()
	if err := s.st.Close(); err != nil {
		errs = append(errs, err)
	}
	s.log.Info("inbox: stopped", "path", s.cfg.Path)
	return errors.Join(errs...)
}

// DB returns the inbox's bbolt database for read-only inspection (tx.Check,
// tx.WriteTo backups) while the service runs. Writing to it bypasses every
// rule of the inbox; don't.
// It is nil when the entries live in a key-value bucket (Config.Bucket).
func (s *Service) DB() *bolt.DB {
	if s.db == nil {
		return nil
	}
	return s.db.Bolt()
}
