package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/gopool"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/subjects"
)

// Config configures a Runtime. Store and Registry are required.
type Config struct {
	// ProtocolVersion is the subject version token; default subjects.DefaultVersion.
	ProtocolVersion string
	// Store is the CardStore (local or natsstore client).
	Store cardstore.Store
	// Registry is the tool registry (local or NATS client).
	Registry registry.Registry
	// Projects are the projects the runtime registers its (non built-in)
	// tools in at start. Commands of every project are served; a project
	// without the tool registered gets a bad_request result.
	Projects []string
	// InstanceID names this process in claims and logs; default
	// "<hostname>-<pid>-<random>".
	InstanceID string
	// Logger; default slog.Default().
	Logger *slog.Logger
	// AckWait is the JetStream ack wait of the tool consumers: a command
	// whose worker died is redelivered this long after its last sign of
	// life. A live worker keeps every command it handles alive with
	// in-progress acks (every AckWait/3), so a long call is not
	// redelivered. Default DefaultAckWait.
	AckWait time.Duration
	// ClaimLease is the lease of an execution claim, renewed while the call
	// runs. A worker that dies holds the call at most this long. Default
	// DefaultClaimLease.
	ClaimLease time.Duration
	// MaxDeliveries bounds how many executions of one call may die without
	// finishing (a worker crash, a kill); the next attempt ends the call
	// failed (internal_error) without running it. Redeliveries caused by an
	// unreachable store or by another worker holding the call do not count.
	// A tool's options.max_deliveries overrides it. Default 5.
	MaxDeliveries int
	// Concurrency bounds the calls of one tool running at once in this
	// process. Default 16.
	Concurrency int
	// EntryCacheTTL is how long a registry entry (and its compiled schema)
	// is reused. Default 5s.
	EntryCacheTTL time.Duration
	// Authorizer, when set, gates every call (built-ins included: it sees
	// Call.Builtin) before its handler runs that the mesh did not admit:
	// with an Authorizer the runtime verifies each command's CG-Admission
	// (Admissions) and runs the Authorizer only on a command without a
	// valid one in a project that accepts raw commands. See Authorizer.
	Authorizer Authorizer
	// Admissions verifies commands' admissions; default, when Authorizer
	// is set, NewAdmissionVerifier on the runtime's connection. Without
	// both, every command runs (a mesh without authorization).
	Admissions AdmissionVerifier
	// ServiceVersion is the version of the micro service the runtime
	// registers for discovery (a semantic version, e.g. "0.1.0-dev"; the
	// utpmesh binary passes its own version). Default DefaultServiceVersion.
	ServiceVersion string
	// Observer receives call events for metrics; nil records nothing.
	Observer Observer
	// Tracer makes the utp.command, utp.execute and utp.report spans
	// (telemetry.NewWorkerTracer); nil traces nothing.
	Tracer Tracer
	// CancelGrace is how long Stop, once its deadline has canceled the
	// calls in flight, waits for them to write and report their canceled
	// results. A call still busy then (a handler that ignores its
	// cancellation, a store call that never returns) is abandoned: Stop
	// returns, and the call's command, never acknowledged, is redelivered
	// to another worker or at the next start. Default DefaultCancelGrace.
	CancelGrace time.Duration
}

// DefaultCancelGrace is Config.CancelGrace's default.
const DefaultCancelGrace = 5 * time.Second

// Failover defaults: a worker that dies mid-call (killed, its host gone)
// stops sending in-progress acks and renewing its claim, and another
// worker takes the call over max(AckWait, ClaimLease) after the dead
// one's last renewal: about 5 s (docs/performance.md has the measured
// stall).
const (
	DefaultAckWait    = 5 * time.Second
	DefaultClaimLease = 5 * time.Second
)

// Runtime serves a set of tools: one durable JetStream consumer per tool,
// shared with every other process serving the same tool.
type Runtime struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	cfg   Config
	log   *slog.Logger
	tools map[string]*Tool // by name
	pmo   map[string]*Tool // built-ins by name

	entries    entryCache
	admissions AdmissionVerifier
	stats      map[string]*toolStats // by tool name; fixed after New
	obs        Observer
	tracer     Tracer

	mu         sync.Mutex
	micro      micro.Service
	refreshSub *nats.Subscription // refresh.go
	// shuttingDown is set once the drain deadline passed: calls tracked
	// from then on are canceled at once.
	shuttingDown bool
	started      bool
	stopped      bool
	consumes     []jetstream.ConsumeContext
	cancelSb     *nats.Subscription
	inflight     map[string]*inflight
	jobSeq       atomic.Uint64
	canceled     map[string]time.Time // recently requested cancels, by call key
	wg           sync.WaitGroup
	jobs         atomic.Int64 // jobs running, the ones wg waits for
	baseCtx      context.Context
	stopAll      context.CancelCauseFunc
}

type inflight struct {
	cancel context.CancelCauseFunc
	tool   string
}

// New returns a Runtime for tools. Call Start to serve them.
func New(nc *nats.Conn, cfg Config, tools ...Tool) (*Runtime, error) {
	if nc == nil {
		return nil, errors.New("worker: nil NATS connection")
	}
	if cfg.Store == nil || cfg.Registry == nil {
		return nil, errors.New("worker: Config.Store and Config.Registry are required")
	}
	if cfg.ProtocolVersion == "" {
		cfg.ProtocolVersion = subjects.DefaultVersion
	}
	if err := subjects.ValidateToken("version", cfg.ProtocolVersion); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if cfg.InstanceID == "" {
		host, _ := os.Hostname()
		cfg.InstanceID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), card.NewID()[24:])
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = DefaultAckWait
	}
	if cfg.ClaimLease <= 0 {
		cfg.ClaimLease = DefaultClaimLease
	}
	if cfg.CancelGrace <= 0 {
		cfg.CancelGrace = DefaultCancelGrace
	}
	if cfg.ClaimLease < cardstore.MinLease {
		return nil, fmt.Errorf("worker: ClaimLease %v is below the minimum %v", cfg.ClaimLease, cardstore.MinLease)
	}
	if cfg.MaxDeliveries <= 0 {
		cfg.MaxDeliveries = 5
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.EntryCacheTTL <= 0 {
		cfg.EntryCacheTTL = 5 * time.Second
	}
	if cfg.ServiceVersion == "" {
		cfg.ServiceVersion = DefaultServiceVersion
	}
	if !semver.MatchString(cfg.ServiceVersion) {
		return nil, fmt.Errorf("worker: Config.ServiceVersion %q is not a semantic version (NATS micro requires one, e.g. 1.2.0 or 0.1.0-dev)", cfg.ServiceVersion)
	}
	for _, p := range cfg.Projects {
		if err := card.ValidateName("project_id", p); err != nil {
			return nil, fmt.Errorf("worker: Config.Projects: %w", err)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("worker: jetstream: %w", err)
	}
	r := &Runtime{
		nc: nc, js: js, cfg: cfg, log: cfg.Logger.With("instance", cfg.InstanceID),
		tools: map[string]*Tool{}, pmo: map[string]*Tool{},
		inflight: map[string]*inflight{}, canceled: map[string]time.Time{},
		stats: map[string]*toolStats{}, obs: cfg.Observer, tracer: cfg.Tracer,
	}
	if r.tracer == nil {
		r.tracer = noTracer{}
	}
	r.entries.ttl = cfg.EntryCacheTTL
	r.admissions = cfg.Admissions
	if r.admissions == nil && cfg.Authorizer != nil {
		r.admissions = NewAdmissionVerifier(nc, r.log)
	}
	for i := range tools {
		t := tools[i]
		if err := t.validate(); err != nil {
			return nil, err
		}
		set := r.tools
		if t.Builtin {
			set = r.pmo
		}
		if _, dup := set[t.Name]; dup {
			return nil, fmt.Errorf("%w: %s is defined twice", ErrInvalidTool, t.Name)
		}
		set[t.Name] = &t
		r.stats[t.Name] = &toolStats{}
	}
	if len(r.tools)+len(r.pmo) == 0 {
		return nil, fmt.Errorf("%w: no tools to serve", ErrInvalidTool)
	}
	r.baseCtx, r.stopAll = context.WithCancelCause(context.Background())
	return r, nil
}

// InstanceID returns the id this runtime uses in claims.
func (r *Runtime) InstanceID() string { return r.cfg.InstanceID }

// Tools returns the tools the runtime serves (built-ins included).
func (r *Runtime) Tools() []*Tool {
	out := make([]*Tool, 0, len(r.tools)+len(r.pmo))
	for _, t := range r.tools {
		out = append(out, t)
	}
	for _, t := range r.pmo {
		out = append(out, t)
	}
	return out
}

// Start checks that the mesh's streams exist (it creates none: the mesh
// core does; a missing one is streams.ErrMissing), registers the tools in the configured
// projects, creates the consumers and starts serving.
func (r *Runtime) Start(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return errors.New("worker: already started")
	}
	r.started = true
	r.mu.Unlock()

	ver := r.cfg.ProtocolVersion
	if err := streams.Check(ctx, r.js, ver); err != nil {
		return err
	}
	for _, p := range r.cfg.Projects {
		for _, t := range r.tools {
			if _, err := r.cfg.Registry.Put(ctx, t.Entry(p)); err != nil {
				return fmt.Errorf("worker: register %s in project %s: %w", t.Name, p, err)
			}
		}
	}
	cancelSubj, err := cancelPattern(ver)
	if err != nil {
		return err
	}
	sub, err := r.nc.Subscribe(cancelSubj, r.onCancel)
	if err != nil {
		return fmt.Errorf("worker: subscribe %s: %w", cancelSubj, err)
	}
	r.mu.Lock()
	r.cancelSb = sub
	r.mu.Unlock()

	type plan struct {
		durable, filter string
		lookup          func(subject string) *Tool
	}
	var plans []plan
	consumers := map[string][2]string{} // tool → consumer, filter (discovery)
	for _, t := range r.tools {
		filter, err := t.filterSubject(ver)
		if err != nil {
			return err
		}
		plans = append(plans, plan{streams.ToolConsumer(t.Name), filter, func(string) *Tool { return t }})
		consumers[t.Name] = [2]string{streams.ToolConsumer(t.Name), filter}
	}
	if len(r.pmo) > 0 {
		filter, err := subjects.PMOInternalPattern(ver)
		if err != nil {
			return err
		}
		lookup := func(subject string) *Tool {
			s, err := subjects.Parse(subject)
			if err != nil {
				return nil
			}
			name, _ := s.PMOTool()
			return r.pmo[name]
		}
		plans = append(plans, plan{streams.PMOConsumer, filter, lookup})
		for name := range r.pmo {
			consumers[name] = [2]string{streams.PMOConsumer, filter}
		}
	}
	if err := r.startDiscovery(consumers); err != nil {
		return err
	}
	for _, p := range plans {
		if err := r.consume(ctx, p.durable, p.filter, p.lookup); err != nil {
			r.stopDiscovery()
			return err
		}
	}
	r.log.Info("worker serving", "tools", len(r.tools), "builtins", len(r.pmo), "projects", r.cfg.Projects)
	return nil
}

func (r *Runtime) consume(ctx context.Context, durable, filter string, lookup func(subject string) *Tool) error {
	cfg := streams.ConsumerConfig(durable, []string{filter}, r.cfg.AckWait, -1)
	cons, err := streams.EnsureConsumer(ctx, r.js, r.cfg.ProtocolVersion, cfg)
	if err != nil {
		return err
	}
	sem := make(chan struct{}, r.cfg.Concurrency)
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		sem <- struct{}{}
		r.wg.Add(1)
		r.jobs.Add(1)
		gopool.Go(func() {
			defer func() { <-sem; r.jobs.Add(-1); r.wg.Done() }()
			defer keepAlive(msg, r.cfg.AckWait/3)()
			t := lookup(msg.Subject())
			if t == nil {
				r.deadLetterUnknown(msg)
				return
			}
			r.handle(t, msg)
		})
	}, jetstream.PullMaxMessages(r.cfg.Concurrency), jetstream.PullExpiry(pullExpiry), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		r.log.Debug("consume", "consumer", durable, "err", err)
	}))
	if err != nil {
		return fmt.Errorf("worker: consume %s: %w", durable, err)
	}
	r.mu.Lock()
	r.consumes = append(r.consumes, cc)
	r.mu.Unlock()
	return nil
}

// pullExpiry is how long one pull request of a tool consumer waits; the
// server's idle heartbeats come every half of it, and two missed make the
// client pull again. nats.go's default (30 s) left a worker idle for 30 s
// after JetStream restarted (the storage guard's heal, pkg/embednats) or a
// consumer's leader moved; 5 s bounds that to 5 s.
const pullExpiry = 5 * time.Second

// keepAlive sends an in-progress ack for msg every interval until the
// returned stop is called, so that a short AckWait redelivers the
// commands of a dead worker quickly and never those of a live one, slow
// as its store, gate or report may be. After the message's ack, nak or
// term the in-progress acks are refused locally and not sent.
func keepAlive(msg jetstream.Msg, every time.Duration) (stop func()) {
	done := make(chan struct{})
	every = max(every, time.Millisecond) // a ticker needs a positive period
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if err := msg.InProgress(); errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
					return
				}
			}
		}
	}()
	return func() { close(done) }
}

// Stop stops taking commands and waits for the calls in flight. When ctx
// ends first, the remaining calls are canceled: they end with status
// canceled and are reported, so no caller waits forever; calls that were
// claimed but had not started their handler yet end canceled without
// running it. Commands not yet received stay in the stream for another
// worker or the next start. Stop then unregisters the discovery service.
//
// Stop returns once every call has been reported (or could not be), or
// Config.CancelGrace after the cancellation when a call is stuck: such a
// call is abandoned, unacknowledged, for redelivery. When
// it had to cancel calls it returns an error wrapping ErrDrainTimeout (and
// ctx's error): the designed outcome of a deadline, which callers that
// treat it as a clean stop (the utpmesh CLI does) test with errors.Is.
// Stop is idempotent; later calls return nil.
func (r *Runtime) Stop(ctx context.Context) error {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return nil
	}
	r.stopped = true
	consumes := r.consumes
	sub := r.cancelSb
	r.mu.Unlock()
	for _, cc := range consumes {
		cc.Stop()
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		n := r.cancelAllInflight()
		r.log.Warn("drain deadline passed; canceling calls in flight", "calls", n, "err", ctx.Err())
		err = fmt.Errorf("%w: %d calls canceled (each ends with a canceled result): %w", ErrDrainTimeout, n, ctx.Err())
		grace := time.NewTimer(r.cfg.CancelGrace)
		select {
		case <-done:
		case <-grace.C:
			// Stuck: a handler that ignores its cancellation, or a store
			// or inbox call that does not return. Do not wait for it:
			// its command is not acknowledged, so it is redelivered.
			stuck := r.jobs.Load()
			r.log.Error("calls still busy after their cancellation; abandoning them (their commands are redelivered)",
				"calls", stuck, "grace", r.cfg.CancelGrace)
			err = fmt.Errorf("%w: %d calls canceled; %d still busy %v later were abandoned and will be redelivered: %w",
				ErrDrainTimeout, n, stuck, r.cfg.CancelGrace, ctx.Err())
		}
		grace.Stop()
	}
	r.stopAll(errShutdown)
	if sub != nil {
		_ = sub.Unsubscribe()
	}
	r.stopDiscovery()
	r.log.Info("worker stopped")
	return err
}

func (r *Runtime) cancelAllInflight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shuttingDown = true
	for _, f := range r.inflight {
		f.cancel(errShutdown)
	}
	return len(r.inflight)
}
