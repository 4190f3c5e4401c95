package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/registry/natsreg"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// DefaultDrainTimeout is how long Serve lets the calls in flight finish
// once its context ends, before it cancels them.
const DefaultDrainTimeout = 30 * time.Second

// ErrNoAuthorizer: Serve or Start was given neither WithAuthorizer nor
// WithoutAuthorizer. A worker outside the mesh process runs the gate
// itself, so serving without one must be asked for.
var ErrNoAuthorizer = errors.New("worker: no authorizer: pass WithAuthorizer (e.g. natsauthz.NewRemoteGate, the gate of 'utpmesh up') or WithoutAuthorizer")

// Option configures Serve and Start. An Option that is given an invalid
// value makes them return its error, before anything is started.
type Option func(*settings) error

// settings is what the Options set.
type settings struct {
	cfg        Config
	channel    string
	drain      time.Duration
	authorized bool // WithAuthorizer or WithoutAuthorizer was given
}

// WithProjects registers the tools in these projects at start (default:
// none; commands of every project are served, and a project without the
// tool registered gets a bad_request result).
func WithProjects(projects ...string) Option {
	return func(s *settings) error {
		for _, p := range projects {
			if err := card.ValidateName("project_id", p); err != nil {
				return fmt.Errorf("worker: WithProjects: %w", err)
			}
		}
		s.cfg.Projects = append(s.cfg.Projects, projects...)
		return nil
	}
}

// WithVersion sets the protocol version token of the subjects (default
// subjects.DefaultVersion).
func WithVersion(ver string) Option {
	return func(s *settings) error {
		if err := subjects.ValidateToken("version", ver); err != nil {
			return fmt.Errorf("worker: WithVersion: %w", err)
		}
		s.cfg.ProtocolVersion = ver
		return nil
	}
}

// WithChannel sets the channel token of the CardStore and registry
// requests (default svc.DefaultChannel). Commands of every channel
// are served whatever it is.
func WithChannel(channel string) Option {
	return func(s *settings) error {
		if err := subjects.ValidateToken("channel_id", channel); err != nil {
			return fmt.Errorf("worker: WithChannel: %w", err)
		}
		s.channel = channel
		return nil
	}
}

// WithConcurrency bounds the calls of one tool running at once (default 16).
func WithConcurrency(n int) Option {
	return func(s *settings) error {
		if n < 1 {
			return fmt.Errorf("worker: WithConcurrency: %d is below 1", n)
		}
		s.cfg.Concurrency = n
		return nil
	}
}

// WithInstanceID names this process in claims and logs (default
// "<hostname>-<pid>-<random>").
func WithInstanceID(id string) Option {
	return func(s *settings) error { s.cfg.InstanceID = id; return nil }
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) error { s.cfg.Logger = l; return nil }
}

// WithLeases sets the execution claim's lease, the consumers' ack wait and
// the poison limit (Config.ClaimLease, AckWait, MaxDeliveries); zero or
// less keeps the default.
func WithLeases(claimLease, ackWait time.Duration, maxDeliveries int) Option {
	return func(s *settings) error {
		s.cfg.ClaimLease, s.cfg.AckWait, s.cfg.MaxDeliveries = claimLease, ackWait, maxDeliveries
		return nil
	}
}

// WithServiceVersion sets the semantic version of the discovery service
// (default DefaultServiceVersion).
func WithServiceVersion(v string) Option {
	return func(s *settings) error {
		if !semver.MatchString(v) {
			return fmt.Errorf("worker: WithServiceVersion: %q is not a semantic version", v)
		}
		s.cfg.ServiceVersion = v
		return nil
	}
}

// WithAuthorizer gates every call with a (see Authorizer).
func WithAuthorizer(a Authorizer) Option {
	return func(s *settings) error {
		if a == nil {
			return errors.New("worker: WithAuthorizer: nil Authorizer (use WithoutAuthorizer)")
		}
		s.cfg.Authorizer, s.authorized = a, true
		return nil
	}
}

// WithAdmissions verifies every command's CG-Admission with v instead of
// the default NATSAdmissions (see AdmissionVerifier); with
// WithoutAuthorizer it makes the runtime refuse commands the mesh did not
// admit (in a project that accepts raw commands they then run unchecked).
func WithAdmissions(v AdmissionVerifier) Option {
	return func(s *settings) error {
		if v == nil {
			return errors.New("worker: WithAdmissions: nil AdmissionVerifier")
		}
		s.cfg.Admissions = v
		return nil
	}
}

// WithoutAuthorizer runs every call without a gate: only for a mesh
// without authorization, never for one started by 'utpmesh up'.
func WithoutAuthorizer() Option {
	return func(s *settings) error { s.cfg.Authorizer, s.authorized = nil, true; return nil }
}

// WithObserver receives the call events (e.g. pkg/metrics).
func WithObserver(o Observer) Option {
	return func(s *settings) error { s.cfg.Observer = o; return nil }
}

// WithTracer makes the calls' spans (e.g. telemetry.NewWorkerTracer).
func WithTracer(t Tracer) Option {
	return func(s *settings) error { s.cfg.Tracer = t; return nil }
}

// WithStore uses st as the CardStore instead of a natsstore client on the
// connection (e.g. a client the tools' own services share).
func WithStore(st cardstore.Store) Option {
	return func(s *settings) error { s.cfg.Store = st; return nil }
}

// WithRegistry uses reg as the registry instead of a natsreg client on
// the connection.
func WithRegistry(reg registry.Registry) Option {
	return func(s *settings) error { s.cfg.Registry = reg; return nil }
}

// WithDrainTimeout sets how long Serve lets calls in flight finish once
// its context ends (default DefaultDrainTimeout).
func WithDrainTimeout(d time.Duration) Option {
	return func(s *settings) error {
		if d <= 0 {
			return fmt.Errorf("worker: WithDrainTimeout: %v is not a positive duration", d)
		}
		s.drain = d
		return nil
	}
}

// Start serves tools on nc until the returned Runtime is stopped: it
// makes the CardStore and registry clients of the mesh's services on nc
// (unless WithStore, WithRegistry), builds the Runtime and starts it.
// It returns ErrNoAuthorizer unless an Option chose the gate.
func Start(ctx context.Context, nc *nats.Conn, tools []Tool, opts ...Option) (*Runtime, error) {
	s, err := newSettings(nc, opts)
	if err != nil {
		return nil, err
	}
	return start(ctx, nc, s, tools)
}

func start(ctx context.Context, nc *nats.Conn, s *settings, tools []Tool) (*Runtime, error) {
	rt, err := New(nc, s.cfg, tools...)
	if err != nil {
		return nil, err
	}
	if err := rt.Start(ctx); err != nil {
		_ = rt.Stop(context.Background())
		return nil, err
	}
	return rt, nil
}

// Serve serves tools on nc until ctx ends, then stops gracefully: it
// stops taking commands and lets the calls in flight finish for the drain
// timeout (WithDrainTimeout), after which it cancels them; each canceled
// call ends with a canceled result that is reported. It returns nil after
// such a stop, or the error that kept it from starting. See Start for
// what it wires.
func Serve(ctx context.Context, nc *nats.Conn, tools []Tool, opts ...Option) error {
	s, err := newSettings(nc, opts)
	if err != nil {
		return err
	}
	rt, err := start(ctx, nc, s, tools)
	if err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), s.drain)
	defer cancel()
	if err := rt.Stop(sctx); err != nil && !errors.Is(err, ErrDrainTimeout) {
		return err
	}
	return nil
}

// newSettings applies opts and fills in the clients the caller did not give.
func newSettings(nc *nats.Conn, opts []Option) (*settings, error) {
	if nc == nil {
		return nil, errors.New("worker: nil NATS connection")
	}
	s := &settings{drain: DefaultDrainTimeout}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if !s.authorized {
		return nil, ErrNoAuthorizer
	}
	ver := s.cfg.ProtocolVersion
	if ver == "" {
		ver = subjects.DefaultVersion
	}
	ch := s.channel
	if ch == "" {
		ch = svc.DefaultChannel
	}
	if s.cfg.Store == nil {
		st, err := natsstore.NewClient(nc, svc.WithVersion(ver), svc.WithChannel(ch))
		if err != nil {
			return nil, fmt.Errorf("worker: CardStore client: %w", err)
		}
		s.cfg.Store = st
	}
	if s.cfg.Registry == nil {
		reg, err := natsreg.NewClient(nc, svc.WithVersion(ver), svc.WithChannel(ch))
		if err != nil {
			return nil, fmt.Errorf("worker: registry client: %w", err)
		}
		s.cfg.Registry = reg
	}
	return s, nil
}
