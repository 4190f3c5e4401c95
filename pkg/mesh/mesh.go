// Package mesh assembles a whole mesh in one process: an embedded
// nats-server with JetStream, the CardStore, the tool registry and the inbox
// (each served over NATS), and a worker runtime with the PMO built-ins and the
// configured tool services. It is what `utpmesh up` runs and what end-to-end
// tests and benchmarks start.
//
// Data directory layout:
//
//	<DataDir>/LOCK         held (flock) by the running mesh: pid, host, command, start time
//	<DataDir>/jetstream/   JetStream streams (commands, events)
//	<DataDir>/cards.db     the node file (bbolt): the CardStore and the inbox's entries
//	<DataDir>/registry.db  tool registry (bbolt)
//	<DataDir>/inbox.db.migrated  the inbox's file before the node file, once its entries moved in
//	<DataDir>/policies.db  Cedar policy sets and auth configs (Config.Auth)
//	<DataDir>/keys/        projects' mandate issuer keys (Config.Auth)
//	<DataDir>/admission.key this node's admission signing key (pkg/admit; 0600)
//	<DataDir>/creds/       NATS identities' nkey seeds (Config.Identities)
//	<DataDir>/archive/     turns archived by retention (Config.Retention)
//
// Start takes the data directory's lock (internal/datalock) before it opens
// anything else, so a second mesh (or a `utpmesh worker` keeping files
// there) on the same directory fails at once with "data directory DIR is in
// use by pid N (COMMAND, started TIME)"; the lock is released last by Stop,
// and by the process's exit however it ends. A busy NATS or metrics address
// fails at once too, naming the address (errors.Is embednats.ErrAddrInUse).
// Tool services that need the mesh's connection and CardStore are built by
// Config.Services once those exist, so a start that fails earlier has
// opened none of their files and started none of their goroutines.
//
// Stop shuts down in the order that loses nothing: stop taking new commands,
// drain the calls in flight (canceling what cannot finish by the deadline,
// which still writes and reports a result), stop the inbox, stop the svc
// servers, close the stores, and stop the broker (and, when Config.MetricsAddr
// is set, the metrics server) last. A drain that had to cancel calls
// (worker.ErrDrainTimeout) is logged, not returned: it is the designed
// outcome of the deadline.
//
// Limits: Config.MaxPayload (the broker's message size) must exceed
// Config.MaxCardBytes (the CardStore's card size) by 64 KiB; Start refuses
// other combinations with an error naming both.
package mesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"
	"go.opentelemetry.io/otel/trace"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/internal/datalock"
	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/internal/portcheck"
	"github.com/utpmesh/utpmesh/pkg/admit"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/boltpolicy"
	"github.com/utpmesh/utpmesh/pkg/builtins"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/boltinbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/inboxsvc"
	"github.com/utpmesh/utpmesh/pkg/inbox/kvinbox"
	"github.com/utpmesh/utpmesh/pkg/metrics"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/registry/natsreg"
	"github.com/utpmesh/utpmesh/pkg/retention"
	"github.com/utpmesh/utpmesh/pkg/telemetry"
	"github.com/utpmesh/utpmesh/pkg/unrouted"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/subjects"
)

// Config configures a mesh.
type Config struct {
	// DataDir holds every file of the mesh. Required.
	DataDir string
	// Listen is the NATS client address, host:port; default 127.0.0.1:4222.
	// Port 0 picks a free port (tests).
	Listen string
	// ProtocolVersion is the subject version token; default subjects.DefaultVersion.
	ProtocolVersion string
	// Projects the tools are registered in at start; default ["demo"].
	Projects []string
	// Tools are the tool services to serve besides the PMO built-ins.
	Tools []worker.Tool
	// Services, when set, builds more tools once the mesh's connection and
	// CardStore exist, just before the worker runtime starts; they are
	// served with Tools. ctx ends when the mesh stops, after the worker has
	// drained: services that run goroutines or keep files bind them to it.
	Services func(ctx context.Context, m *Mesh) ([]worker.Tool, error)
	// Command says what runs the mesh, e.g. "utpmesh up"; it is recorded
	// in <DataDir>/LOCK and shown to a second process that tries the same
	// data directory. Default: the program name.
	Command string
	// Worker tunes the worker runtime (Store, Registry and Projects are set
	// by the mesh).
	Worker worker.Config
	// Logger; default slog.Default().
	Logger *slog.Logger
	// MetricsAddr, when set (host:port; port 0 picks one), serves
	// Prometheus /metrics and /healthz there (pkg/metrics). Empty: off.
	MetricsAddr string
	// TracerProvider traces the worker and the inbox (pkg/telemetry);
	// nil traces nothing.
	TracerProvider trace.TracerProvider
	// MaxPayload is the NATS max message size in bytes; 0 means
	// embednats.DefaultMaxPayload (8 MiB). It must exceed the card limit
	// by at least 64 KiB.
	MaxPayload int32
	// MaxCardBytes lowers the CardStore's limit on one card's encoding;
	// 0 means cardstore.DefaultMaxCardBytes (1 MiB, also the maximum).
	MaxCardBytes int
	// DispatchLinger is how long the commit of a new call's tool.call card
	// may wait for another write to share it (boltstore.WithDispatchLinger;
	// it applies where the node keeps an outbox: a single node with its
	// embedded nats-server, no Cluster, Replicated or External): a call
	// whose in-process worker answers within it has its card and its
	// result in one commit. 0 means
	// DefaultDispatchLinger; a negative value turns it off; at most
	// boltstore.MaxDispatchLinger.
	DispatchLinger time.Duration
	// Auth, when set, turns the Cedar gate on (pkg/authz): the mesh opens
	// <DataDir>/policies.db, serves the authz svc, verifies every call's
	// mandate and authorizes it, and answers mandate_query. Nil: no gate.
	Auth *AuthConfig
	// TLSCert and TLSKey, when set (PEM files), make the NATS client port
	// require TLS; clients verify the certificate against their CA
	// (nats.RootCAs). The mesh's own connection is in-process.
	TLSCert, TLSKey string
	// ServerName names the embedded nats-server; unique per node in a
	// cluster (e.g. the host name). Default "utpmesh".
	ServerName string
	// Cluster, when set, makes the embedded nats-server a node of a NATS
	// cluster (routes to every node; see embednats.Cluster) and keeps the
	// mesh's state replicated (Replicated, 3 replicas, unless set).
	Cluster *embednats.Cluster
	// Replicated, when set, keeps the mesh's state in JetStream instead of
	// bbolt files: the streams with Replicas copies, the CardStore
	// (cardstore/jsstore), the registry (jsreg), policies (jspolicy) and
	// the inbox (a key-value bucket). Every mesh process of a cluster then
	// serves the same state, and the loss of one node loses nothing
	// acknowledged. Issuer keys stay files (KeyDir): give every node the
	// same ones.
	Replicated *ReplicatedConfig
	// External, when set, joins a NATS deployment the mesh does not run
	// instead of embedding a nats-server; the state is then replicated
	// in its JetStream (see ExternalConfig).
	External *ExternalConfig
	// Identities, when set, turns NATS authentication on: only the
	// identities listed (plus the mesh core and admin) may connect, each
	// with the permissions of its role (internal/meshauth). Their nkey
	// seeds are created under <DataDir>/creds on first start. Nil: the
	// NATS port is open to anyone who reaches it.
	Identities *IdentityConfig
	// Unrouted tunes the sweeper that answers tool commands no tool
	// serves (pkg/unrouted); Version, Store and Registry are the mesh's.
	Unrouted unrouted.Config
	// Retention tunes the retention sweeper (pkg/retention), which applies
	// each project's retention policy every Interval, archiving to
	// <DataDir>/archive unless Archive is set. The policies are the
	// projects' configurations in the policy store (needs Auth) unless
	// Policies is set; with neither, no sweeper runs. Store, Inbox and
	// Projects are the mesh's.
	Retention retention.Config
	// Markers tunes the purge of old KV delete markers (pkg/retention's
	// MarkerPurger), which runs on every mesh: Buckets are the
	// catalogues' state buckets (cmd/utpmesh passes them: the core knows
	// no catalogue), to which the mesh adds its inbox bucket when the
	// inbox is in JetStream; NC is the mesh's.
	Markers retention.MarkerConfig
	// LeaderCheck, on a cluster node (Config.Cluster), is how often the
	// node leading the command stream asks the leaders of every other
	// stream, bucket and consumer it replicates to move to it (see
	// leaders.go: a node that leads nothing costs no election when it is
	// lost). 0 means DefaultLeaderCheck; negative turns it off.
	LeaderCheck time.Duration
}

// ReplicatedConfig configures the replicated state (Config.Replicated).
type ReplicatedConfig struct {
	// Replicas is how many servers keep each stream and bucket: 3 in a
	// 3-node cluster (a write is acknowledged once two have it), 1 on a
	// single server. Default 3 with Config.Cluster, else 1.
	Replicas int
}

// IdentityConfig lists the identities a mesh with NATS authentication
// admits besides its core and admin (see Config.Identities).
type IdentityConfig struct {
	// Dir holds the seed files; default <DataDir>/creds.
	Dir string
	// AgentProjects get one agent identity each (agent-<project>);
	// default Config.Projects.
	AgentProjects []string
	// Workers get one worker identity each (worker-<service>); further
	// identities of any role (per-agent: agent-<project>.<agent>) may be
	// listed too.
	Workers []meshauth.Identity
	// RawCommands reports whether a project's agent identities may publish
	// raw tool and PMO commands (meshauth.Identity.RawCommands); nil: a
	// project may only when its authz config opted in (`utpmesh policy
	// config --commands raw`, read from the policy store at start and
	// followed live on every config change), else never: agents dispatch
	// through the mesh's admission. Change it live with
	// Mesh.SetRawCommands.
	RawCommands func(project string) bool
}

// AuthConfig configures the mesh's authorization (see Config.Auth).
type AuthConfig struct {
	// KeyDir holds the projects' issuer keys; default <DataDir>/keys.
	KeyDir string
	// Catalogues are the catalogues the mesh serves: New registers their
	// schema fragments (authz.RegisterCatalogue) and the gate resolves
	// calls' resources with them. Optional.
	Catalogues []authz.Catalogue
}

// DefaultDispatchLinger is Config.DispatchLinger's default: long enough
// for an in-process worker of a quick tool to answer while its card's
// commit waits (docs/performance.md), short against any tool that does
// I/O.
const DefaultDispatchLinger = time.Millisecond

// payloadSlack is what MaxPayload must leave above the card limit for the
// svc request envelope around a card.
const payloadSlack = 64 << 10

// stopGrace is the time each stage after the worker gets when the drain
// used up the caller's deadline: the inbox, the svc servers and the stores
// still stop cleanly.
const stopGrace = 10 * time.Second

// Mesh is a running mesh.
type Mesh struct {
	cfg    Config
	srv    *embednats.Server
	nc     *nats.Conn
	cards  cardstore.Store
	reg    registry.Registry
	boltDB *bolt.DB // the node file (nodestore.go), nil when the cards are replicated
	// The policy store (replicated state only; serve opens policies.db
	// when nil) and the inbox's backend (the node file's, or the bucket).
	policies    policystore.Store
	inboxStore  inbox.Backend
	inboxBoltDB *boltinbox.DB         // in the node file, nil when the inbox is replicated
	resultHook  *boltinbox.ResultHook // the node file's: a result's entry in its transaction
	// ringSince is inboxsvc.Config.RingMarkedSince: set when the wakeup
	// stream is async (outbox.go).
	ringSince time.Time
	cardSrv   *natsstore.Server
	regSrv    *natsreg.Server
	auth      *natsauthz.Service
	admit     *admit.Service
	admitKeys *admit.KVKeys // replicated state only: the nodes' admission keys
	inbox     *inboxsvc.Service
	rt        *worker.Runtime
	metrics   *metrics.Metrics
	msrv      *metrics.Server
	stoppers  []func(context.Context) error
	names     sync.Map // public nkey → identity name (Config.Identities): signed admin requests
	idents    identState
	unrouted  *unrouted.Sweeper
	retention *retention.Sweeper // nil without Auth or Config.Retention.Policies
	markers   *retention.MarkerPurger
	ready     atomic.Bool   // Start has finished (health)
	connOpts  []nats.Option // the mesh's own connections' options (admission.go)
}

// Start starts a mesh. On error everything started so far is stopped.
func Start(ctx context.Context, cfg Config) (m *Mesh, err error) {
	if cfg.DataDir == "" {
		return nil, errors.New("mesh: DataDir is required")
	}
	if cfg.ProtocolVersion == "" {
		cfg.ProtocolVersion = subjects.DefaultVersion
	}
	if len(cfg.Projects) == 0 {
		cfg.Projects = []string{"demo"}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Cluster != nil && cfg.Replicated == nil {
		cfg.Replicated = &ReplicatedConfig{}
	}
	host, port, err := splitListen(cfg.Listen)
	if err != nil {
		return nil, err
	}
	if err := checkLimits(cfg.MaxPayload, cfg.MaxCardBytes); err != nil {
		return nil, err
	}
	if cfg.DispatchLinger > boltstore.MaxDispatchLinger {
		return nil, fmt.Errorf("mesh: dispatch linger %v: use at most %v (0 means %v, a negative value turns it off)", cfg.DispatchLinger, boltstore.MaxDispatchLinger, DefaultDispatchLinger)
	}
	if cfg.Command == "" {
		cfg.Command = filepath.Base(os.Args[0])
	}
	lock, err := datalock.Acquire(cfg.DataDir, cfg.Command)
	if errors.Is(err, datalock.ErrInUse) {
		return nil, fmt.Errorf("%w; stop it, or pass --data with another directory", err)
	}
	if err != nil {
		return nil, fmt.Errorf("mesh: %w", err)
	}
	m = &Mesh{cfg: cfg}
	m.push(func(context.Context) error { return lock.Release() }) // released last
	defer func() {
		if err != nil {
			_ = m.Stop(context.Background())
			m = nil
		}
	}()
	log := cfg.Logger
	if cfg.MetricsAddr != "" {
		if err := portcheck.Free(cfg.MetricsAddr); errors.Is(err, portcheck.ErrInUse) {
			return m, fmt.Errorf("metrics %w; is another 'utpmesh up' running? pass --metrics-addr 127.0.0.1:0 for a free port, or --metrics-addr '' for no metrics", err)
		}
		version := cfg.Worker.ServiceVersion
		if version == "" {
			version = worker.DefaultServiceVersion
		}
		m.metrics = metrics.New(version)
		m.msrv, err = metrics.Serve(m.metrics, metrics.ServerConfig{Addr: cfg.MetricsAddr, Logger: log.With("component", "metrics"), Health: m.health, Ready: m.Ready})
		if err != nil {
			return m, fmt.Errorf("mesh: --metrics-addr: %w", err)
		}
		m.push(m.msrv.Shutdown) // stopped last: scrapes see the whole shutdown
	}

	if cfg.External != nil {
		err = m.join(ctx)
	} else {
		err = m.embed(ctx, host, port)
	}
	if err != nil {
		return m, err
	}
	js, err := jetstream.New(m.nc)
	if err != nil {
		return m, fmt.Errorf("mesh: jetstream: %w", err)
	}
	if m.cfg.Replicated != nil {
		if err = m.openReplicated(ctx, js); err != nil {
			return m, err
		}
	} else if err = m.openFiles(ctx, js); err != nil {
		return m, err
	}
	if err := m.serve(ctx); err != nil {
		return m, err
	}
	if cfg.Cluster != nil && cfg.LeaderCheck >= 0 {
		every := cfg.LeaderCheck
		if every == 0 {
			every = DefaultLeaderCheck
		}
		kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() { defer close(done); m.keepLeaders(kctx, every) }()
		m.push(func(context.Context) error { cancel(); <-done; return nil })
	}
	m.ready.Store(true)
	return m, nil
}

// embed starts the embedded nats-server (a cluster node with
// Config.Cluster) and connects the mesh to it.
func (m *Mesh) embed(ctx context.Context, host string, port int) (err error) {
	cfg, log := m.cfg, m.cfg.Logger
	var users []embednats.User
	connOpts := []nats.Option{nats.Name("utpmesh-up"), nats.MaxReconnects(-1)}
	if cfg.Identities != nil {
		var coreSeed string
		users, coreSeed, err = m.identities()
		if err != nil {
			return err
		}
		opt, err := creds.Option(coreSeed)
		if err != nil {
			return err
		}
		connOpts = append(connOpts, opt)
	}
	m.srv, err = embednats.Start(embednats.Config{DataDir: cfg.DataDir, Host: host, Port: port, JetStream: true, MaxPayload: cfg.MaxPayload, Logger: log.With("component", "nats"), Users: users,
		TLSCert: cfg.TLSCert, TLSKey: cfg.TLSKey, ServerName: cfg.ServerName, Cluster: cfg.Cluster})
	if errors.Is(err, embednats.ErrAddrInUse) {
		return fmt.Errorf("%w; is another 'utpmesh up' or nats-server running? pass --nats-listen 127.0.0.1:0 for a free port", err)
	}
	if err != nil {
		return err
	}
	m.push(m.srv.Shutdown)
	if cfg.Cluster != nil {
		if err := m.awaitMeta(ctx); err != nil {
			return err
		}
	}
	m.connOpts = connOpts
	m.nc, err = m.srv.Connect(connOpts...)
	if err != nil {
		return fmt.Errorf("mesh: connect: %w", err)
	}
	m.push(func(context.Context) error { m.nc.Close(); return nil })
	return nil
}

// health is /healthz: ready once Start has returned, and, on a cluster
// node, while its JetStream is current with the cluster's meta leader (a
// node that lost its peers answers 503, so a load balancer or Kubernetes
// stops sending it clients) or stopped by its storage guard (a full disk
// is a matter of readiness: the node heals by itself, a restart would not
// help).
func (m *Mesh) health() error {
	if !m.ready.Load() {
		return errors.New("starting")
	}
	if m.cfg.External != nil {
		return m.externalHealth()
	}
	if m.cfg.Cluster != nil && m.srv != nil && m.srv.StorageFault() == "" && !m.srv.NATS().JetStreamIsCurrent() {
		return errors.New("not current with the JetStream cluster (no meta leader reachable)")
	}
	return nil
}

// Ready is /readyz: nil once Start has returned while the embedded
// server can take writes (embednats.Server.Ready: JetStream on and, on a
// cluster node, in quorum; the store's disk above its floor and writing;
// no stream with a write error), else why not.
func (m *Mesh) Ready() error {
	if err := m.health(); err != nil {
		return err
	}
	if m.srv == nil { // Config.External: health checked the connection
		return nil
	}
	return m.srv.Ready()
}

// serve starts the svc servers, the inbox and the worker runtime on the
// state m holds.
func (m *Mesh) serve(ctx context.Context) (err error) {
	cfg, log := m.cfg, m.cfg.Logger

	m.cardSrv, err = natsstore.NewServer(m.nc, m.cards, natsstore.ServerConfig{Version: cfg.ProtocolVersion, Logger: log.With("component", "cardstore")})
	if err != nil {
		return err
	}
	m.push(m.cardSrv.Stop)
	m.regSrv, err = natsreg.NewServer(m.nc, m.reg, natsreg.ServerConfig{Version: cfg.ProtocolVersion, Logger: log.With("component", "registry"), Identities: m.identityNames()})
	if err != nil {
		return err
	}
	m.push(m.regSrv.Stop)
	if err := m.startIdentityService(); err != nil {
		return err
	}
	if cfg.Auth != nil {
		if m.policies == nil { // single node: policies.db beside the other files
			pol, err := boltpolicy.Open(filepath.Join(cfg.DataDir, "policies.db"),
				boltpolicy.WithActions(authz.RegistryActions{Registry: m.reg}))
			if err != nil {
				return err
			}
			m.policies = pol
			m.push(func(context.Context) error { return pol.Close() })
		}
		m.auth, err = natsauthz.Start(ctx, m.nc, natsauthz.StartConfig{DataDir: cfg.DataDir, KeyDir: cfg.Auth.KeyDir, Registry: m.reg, Store: m.policies,
			Resources: resourceResolvers(cfg.Auth.Catalogues), Version: cfg.ProtocolVersion, Logger: log.With("component", "authz"),
			OnConfig: m.followRawCommands})
		if err != nil {
			return err
		}
		m.push(m.auth.Stop)
		m.auth.SetIdentities(m.identityNames())
		if err := m.loadRawCommands(ctx); err != nil {
			return err
		}
	}

	if err := m.startAdmission(ctx); err != nil {
		return err
	}

	icfg := inboxsvc.Config{Version: cfg.ProtocolVersion, Store: m.cards, Backend: m.inboxStore, Logger: log, TracerProvider: cfg.TracerProvider,
		RingMarkedSince: m.ringSince}
	if m.metrics != nil {
		icfg.Observer = m.metrics.Inbox()
	}
	m.inbox, err = inboxsvc.New(m.nc, icfg)
	if err != nil {
		return err
	}
	// Stop works on a service that never started.
	m.push(m.inbox.Stop)
	if m.metrics != nil {
		m.metrics.WatchPending(m.inbox.Pending)
	}
	if err = m.inbox.Start(ctx); err != nil {
		return err
	}
	if m.resultHook != nil {
		// From now on a result's entry is stored with the result, and
		// its wakeup rung once that commit is durable.
		m.resultHook.Attach(m.inbox)
	}

	wcfg := cfg.Worker
	wcfg.ProtocolVersion, wcfg.Store, wcfg.Registry, wcfg.Projects = cfg.ProtocolVersion, m.workerStore(), m.reg, cfg.Projects
	if wcfg.Logger == nil {
		wcfg.Logger = log.With("component", "worker")
	}
	if wcfg.Observer == nil && m.metrics != nil {
		wcfg.Observer = m.metrics.Worker()
	}
	if wcfg.Tracer == nil && cfg.TracerProvider != nil {
		wcfg.Tracer = telemetry.NewWorkerTracer(cfg.TracerProvider)
	}
	if wcfg.InstanceID == "" {
		host, _ := os.Hostname()
		wcfg.InstanceID = fmt.Sprintf("up-%s-%d", host, os.Getpid())
	}
	pdeps := builtins.Deps{NC: m.nc, Store: m.cards, Registry: m.reg, Holder: wcfg.InstanceID + "-pmo"}
	if m.auth != nil {
		wcfg.Authorizer, pdeps.Mandates = m.auth.Gate, m.auth.Querier
		if wcfg.Admissions == nil {
			v := worker.NewAdmissionVerifier(m.nc, wcfg.Logger)
			v.Own = m.admit.Signed // what this process admitted: no second signature check
			wcfg.Admissions = v
		}
	}
	tools := append(builtins.Tools(pdeps), cfg.Tools...)
	if cfg.Services != nil {
		// The services' context ends after the worker has drained (Stop
		// runs the stoppers in reverse), not when the caller's ctx ends.
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		m.push(func(context.Context) error { cancel(); return nil })
		more, err := cfg.Services(sctx, m)
		if err != nil {
			return err
		}
		tools = append(tools, more...)
	}
	m.rt, err = worker.New(m.nc, wcfg, tools...)
	if err != nil {
		return err
	}
	if err = m.rt.Start(ctx); err != nil {
		return err
	}
	m.push(m.rt.Stop)
	ucfg := cfg.Unrouted
	ucfg.Version, ucfg.Store, ucfg.Registry = cfg.ProtocolVersion, m.cards, m.reg
	if ucfg.Logger == nil {
		ucfg.Logger = log.With("component", "unrouted")
	}
	if m.unrouted, err = unrouted.New(m.nc, ucfg); err != nil {
		return err
	}
	m.unrouted.Start()
	m.push(m.unrouted.Stop)
	if rcfg := cfg.Retention; m.policies != nil || rcfg.Policies != nil {
		rcfg.Store, rcfg.Inbox, rcfg.Projects = m.cards, m.inbox, cfg.Projects
		if rcfg.Policies == nil {
			rcfg.Policies = retention.FromConfigs{Configs: m.policies}
		}
		if rcfg.Archive == nil {
			rcfg.Archive = &retention.FileArchive{Dir: filepath.Join(cfg.DataDir, "archive"), Clock: rcfg.Clock}
		}
		if rcfg.Holder == "" {
			rcfg.Holder = wcfg.InstanceID + "-retention"
		}
		if rcfg.Logger == nil {
			rcfg.Logger = log.With("component", "retention")
		}
		if m.retention, err = retention.New(rcfg); err != nil {
			return err
		}
		m.retention.Start()
		m.push(func(context.Context) error { m.retention.Stop(); return nil })
	}
	mcfg := cfg.Markers
	mcfg.NC = m.nc
	mcfg.Buckets = slices.Clone(mcfg.Buckets)
	if _, ok := m.inboxStore.(*kvinbox.KV); ok {
		mcfg.Buckets = append(mcfg.Buckets, kvinbox.DefaultBucket)
	}
	if mcfg.Logger == nil {
		mcfg.Logger = log.With("component", "retention")
	}
	if m.markers, err = retention.NewMarkerPurger(mcfg); err != nil {
		return err
	}
	m.markers.Start()
	m.push(func(context.Context) error { m.markers.Stop(); return nil })
	return nil
}

func (m *Mesh) push(f func(context.Context) error) { m.stoppers = append(m.stoppers, f) }

// Admission is the mesh's admission service (svc.dispatch).
func (m *Mesh) Admission() *admit.Service { return m.admit }

// Auth is the mesh's authorization service (policy store, issuer keys,
// gate), or nil when Config.Auth is nil.
func (m *Mesh) Auth() *natsauthz.Service { return m.auth }

// ClientURL is the NATS URL clients and remote workers connect to (with
// Config.External, its URL, passwords masked).
func (m *Mesh) ClientURL() string {
	if m.cfg.External != nil {
		return redactedURLs(m.cfg.External.URL)
	}
	return m.srv.ClientURL()
}

// Conn is the mesh's own NATS connection.
func (m *Mesh) Conn() *nats.Conn { return m.nc }

// Cards is the mesh's CardStore.
func (m *Mesh) Cards() cardstore.Store { return m.cards }

// Inbox is the mesh's inbox service.
func (m *Mesh) Inbox() *inboxsvc.Service { return m.inbox }

// NATS is the embedded nats-server (nil with Config.External).
func (m *Mesh) NATS() *embednats.Server { return m.srv }

// Registry is the mesh's tool registry.
func (m *Mesh) Registry() registry.Registry { return m.reg }

// Retention is the retention sweeper, nil without Config.Auth or
// Config.Retention.Policies.
func (m *Mesh) Retention() *retention.Sweeper { return m.retention }

// Markers returns the purge of old KV delete markers (Config.Markers).
func (m *Mesh) Markers() *retention.MarkerPurger { return m.markers }

// Unrouted is the sweeper answering tool commands no tool serves.
func (m *Mesh) Unrouted() *unrouted.Sweeper { return m.unrouted }

// Runtime is the mesh's worker runtime.
func (m *Mesh) Runtime() *worker.Runtime { return m.rt }

// MetricsURL is the /metrics URL, or "" when Config.MetricsAddr is empty.
func (m *Mesh) MetricsURL() string {
	if m.msrv == nil {
		return ""
	}
	return m.msrv.URL()
}

// Metrics is the mesh's metrics (nil when Config.MetricsAddr is empty).
func (m *Mesh) Metrics() *metrics.Metrics { return m.metrics }

// Config returns the mesh's effective configuration.
func (m *Mesh) Config() Config { return m.cfg }

// Stop shuts the mesh down in reverse start order (see the package doc). The
// worker gets ctx's deadline to drain; the rest stops promptly. Stop is
// idempotent.
func (m *Mesh) Stop(ctx context.Context) error {
	var errs []error
	for i := len(m.stoppers) - 1; i >= 0; i-- {
		if err := m.stoppers[i](ctx); errors.Is(err, worker.ErrDrainTimeout) {
			// Calls canceled at the deadline ended canceled and were
			// reported: the designed outcome, not a failure to stop.
			m.cfg.Logger.Warn("mesh: drain deadline passed; calls in flight were canceled", "err", err)
		} else if err != nil {
			errs = append(errs, err)
			// Later stages get a fresh deadline: a slow drain must not
			// leave files unclosed, nor may a later stage wait forever.
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.Background(), stopGrace)
			defer cancel()
		}
		if ctx.Err() != nil {
			// The drain used the whole deadline (and canceled what it had
			// to): the inbox still takes the canceled calls' reports, and
			// the stores still close cleanly.
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.Background(), stopGrace)
			defer cancel()
		}
	}
	m.stoppers = nil
	return errors.Join(errs...)
}

// checkLimits refuses a NATS max payload that cannot carry the largest card.
func checkLimits(maxPayload int32, maxCardBytes int) error {
	if maxCardBytes < 0 || maxCardBytes > cardstore.DefaultMaxCardBytes {
		return fmt.Errorf("mesh: max card bytes %d: use 1 to %d (0 means %d)", maxCardBytes, cardstore.DefaultMaxCardBytes, cardstore.DefaultMaxCardBytes)
	}
	if maxPayload == 0 {
		maxPayload = embednats.DefaultMaxPayload
	}
	if maxPayload < embednats.MinMaxPayload || maxPayload > embednats.MaxMaxPayload {
		return fmt.Errorf("mesh: NATS max payload %d bytes: use %d (64 KiB) to %d (64 MiB)", maxPayload, embednats.MinMaxPayload, embednats.MaxMaxPayload)
	}
	card := maxCardBytes
	if card == 0 {
		card = cardstore.DefaultMaxCardBytes
	}
	if int(maxPayload) < card+payloadSlack {
		return fmt.Errorf("mesh: NATS max payload %d bytes cannot carry a card of the %d-byte card limit plus its request envelope: raise the max payload to at least %d or lower the card limit to at most %d",
			maxPayload, card, card+payloadSlack, int(maxPayload)-payloadSlack)
	}
	return nil
}

func splitListen(addr string) (string, int, error) {
	if addr == "" {
		return "127.0.0.1", 4222, nil
	}
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("mesh: listen address %q: %w (want host:port, e.g. 127.0.0.1:4222)", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("mesh: listen address %q: port must be 0-65535", addr)
	}
	if port == 0 {
		port = -1 // embednats: random free port
	}
	if h == "" {
		h = "127.0.0.1"
	}
	return h, port, nil
}

// resourceResolvers registers cs and returns them as the gate's
// resolvers.
func resourceResolvers(cs []authz.Catalogue) []authz.ResourceResolver {
	out := make([]authz.ResourceResolver, len(cs))
	for i, c := range cs {
		authz.RegisterCatalogue(c)
		out[i] = c
	}
	return out
}
