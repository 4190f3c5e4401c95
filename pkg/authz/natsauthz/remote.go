package natsauthz

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// DefaultRemoteTTL is how long Remote trusts what it fetched: a policy,
// config or issuer-key change made on the mesh reaches every external
// worker within this time.
const DefaultRemoteTTL = 5 * time.Second

// rekeyInterval bounds the refetches a token naming an unknown kid can
// cause: at most one per project per interval.
const rekeyInterval = time.Second

// RemoteConfig configures a Remote.
type RemoteConfig struct {
	// Version is the protocol version token ("" = default).
	Version string
	// TTL is how long fetched configs, policy sets and issuer keys are
	// used before they are fetched again; default DefaultRemoteTTL. An
	// entry older than TTL is never used: when the refetch fails, the
	// call is refused.
	TTL time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Remote is the gate's PolicySource and mandate.KeyResolver in a process
// that is not the mesh core: it reads the project's config, policy set and
// issuer public key from the authz service (get, config_get, issuer_key)
// and caches each for RemoteConfig.TTL. It never answers from an expired
// entry, so a worker cut off from the mesh refuses calls rather than
// deciding with stale policies.
type Remote struct {
	c   *Client
	cfg RemoteConfig

	mu       sync.Mutex
	configs  map[string]remoteEntry[authz.ProjectConfig]
	policies map[string]remoteEntry[*authz.PolicyDoc]
	keys     map[string]remoteEntry[*mandate.IssuerKey]
}

type remoteEntry[T any] struct {
	v   T
	err error // a cached authz.ErrNotFound (the project has none)
	at  time.Time
}

var (
	_ authz.PolicySource  = (*Remote)(nil)
	_ mandate.KeyResolver = (*Remote)(nil)
)

// NewRemote returns a Remote reading over nc.
func NewRemote(nc *nats.Conn, cfg RemoteConfig) (*Remote, error) {
	c, err := NewClient(nc, cfg.Version)
	if err != nil {
		return nil, err
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultRemoteTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Remote{c: c, cfg: cfg, configs: map[string]remoteEntry[authz.ProjectConfig]{},
		policies: map[string]remoteEntry[*authz.PolicyDoc]{}, keys: map[string]remoteEntry[*mandate.IssuerKey]{}}, nil
}

// Flush forgets everything fetched: the next call fetches again.
func (r *Remote) Flush() {
	r.mu.Lock()
	clear(r.configs)
	clear(r.policies)
	clear(r.keys)
	r.mu.Unlock()
}

// cached returns m[project] when it is younger than the TTL (and, with
// maxAge > 0, younger than maxAge).
func cached[T any](r *Remote, m map[string]remoteEntry[T], project string, maxAge time.Duration) (remoteEntry[T], bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := m[project]
	if !ok {
		return e, false
	}
	age := r.cfg.Now().Sub(e.at)
	if age < 0 || age >= r.cfg.TTL || (maxAge > 0 && age >= maxAge) {
		return e, false
	}
	return e, true
}

func store[T any](r *Remote, m map[string]remoteEntry[T], project string, v T, err error) {
	r.mu.Lock()
	m[project] = remoteEntry[T]{v: v, err: err, at: r.cfg.Now()}
	r.mu.Unlock()
}

// Config implements authz.PolicySource.
func (r *Remote) Config(ctx context.Context, project string) (authz.ProjectConfig, error) {
	if e, ok := cached(r, r.configs, project, 0); ok {
		return e.v, nil
	}
	c, err := r.c.Config(ctx, project)
	if err != nil {
		return authz.ProjectConfig{}, fmt.Errorf("natsauthz: fetch config of %s from the mesh: %w", project, err)
	}
	store(r, r.configs, project, c, nil)
	return c, nil
}

// Policies implements authz.PolicySource.
func (r *Remote) Policies(ctx context.Context, project string) (*authz.PolicyDoc, error) {
	if e, ok := cached(r, r.policies, project, 0); ok {
		return e.v, e.err
	}
	doc, err := r.c.Policies(ctx, project)
	if errors.Is(err, authz.ErrNotFound) {
		store(r, r.policies, project, nil, err)
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("natsauthz: fetch policies of %s from the mesh: %w", project, err)
	}
	store(r, r.policies, project, doc, nil)
	return doc, nil
}

// PublicKey implements mandate.KeyResolver for IssuerName(project)
// issuers: the project's current key from issuer_key. A kid other than
// the cached key's refetches (at most once a second per project), so a
// rotation applies without waiting for the TTL.
func (r *Remote) PublicKey(ctx context.Context, issuer, kid string) (ed25519.PublicKey, error) {
	project, ok := mandate.ProjectOfIssuer(issuer)
	if !ok {
		return nil, fmt.Errorf("%w: issuer %q is not a utpmesh project issuer (%sPROJECT)", mandate.ErrUnknownKey, issuer, mandate.IssuerPrefix)
	}
	e, ok := cached(r, r.keys, project, 0)
	if ok && e.err == nil && e.v.KID != kid {
		e, ok = cached(r, r.keys, project, rekeyInterval)
	}
	if !ok {
		k, err := r.c.IssuerKey(ctx, project)
		if err != nil && !errors.Is(err, authz.ErrNotFound) {
			return nil, fmt.Errorf("natsauthz: fetch issuer key of %s from the mesh: %w", project, err)
		}
		store(r, r.keys, project, k, err)
		e = remoteEntry[*mandate.IssuerKey]{v: k, err: err}
	}
	if e.err != nil {
		return nil, fmt.Errorf("%w: %v", mandate.ErrUnknownKey, e.err)
	}
	if e.v.KID != kid {
		return nil, fmt.Errorf("%w: %s signs with key %s, the token names key %q (rotated out, or not issued by this mesh)", mandate.ErrUnknownKey, issuer, e.v.KID, kid)
	}
	return e.v.Public, nil
}

// RemoteGate is the Cedar gate of a worker outside the mesh process: the
// same authz.Gate `utpmesh up` runs, reading through a Remote, and fail
// closed: when the policies or keys cannot be fetched, the call ends
// auth_failed and its handler never runs.
type RemoteGate struct {
	// Gate decides; its decisions are audited on evt.sys.authz.decision.
	Gate *authz.Gate
	// Remote is the gate's source; Flush it to refetch at once.
	Remote *Remote
	log    *slog.Logger
}

var _ worker.Authorizer = (*RemoteGate)(nil)

// NewRemoteGate returns the gate of an external worker connected by nc.
func NewRemoteGate(nc *nats.Conn, cfg RemoteConfig) (*RemoteGate, error) {
	r, err := NewRemote(nc, cfg)
	if err != nil {
		return nil, err
	}
	g, err := authz.NewGate(authz.GateConfig{Policies: r, Keys: r, Audit: &Publisher{NC: nc, Logger: r.cfg.Logger},
		Now: r.cfg.Now, Logger: r.cfg.Logger})
	if err != nil {
		return nil, err
	}
	return &RemoteGate{Gate: g, Remote: r, log: r.cfg.Logger}, nil
}

// Authorize implements worker.Authorizer. An error that is not a denial
// (the authz service is unreachable, times out, or fails) ends the call
// auth_failed, never runs it; only the caller's own cancellation (the
// worker is stopping) is returned as is.
func (g *RemoteGate) Authorize(ctx context.Context, call *worker.Call) error {
	err := g.Gate.Authorize(ctx, call)
	var ce *card.Error
	if err == nil || errors.As(err, &ce) || ctx.Err() != nil {
		return err
	}
	g.log.Warn("authorization unavailable: call refused", "tool", call.ToolName, "tool_call_id", call.Command.ToolCallID, "project", call.ProjectID, "err", err)
	return worker.Fail(card.CodeAuthFailed, fmt.Sprintf("authorization unavailable, call refused (fail closed): %v; the worker reads policies and issuer keys from the mesh's authz service (svc.authz): check that 'utpmesh up' runs and this worker may reach it", err))
}
