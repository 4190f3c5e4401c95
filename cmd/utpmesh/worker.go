package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/internal/datalock"
	"github.com/utpmesh/utpmesh/internal/portcheck"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/metrics"
	"github.com/utpmesh/utpmesh/pkg/registry/natsreg"
	"github.com/utpmesh/utpmesh/pkg/telemetry"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/catalog"
)

type workerCommand struct{ env env }

func (c *workerCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("worker", "utpmesh worker [--nats URL] [--project P]... [--creds FILE] [--no-gate] [--config FILE] SERVICE... (services: "+strings.Join(catalog.Names(), ", ")+")", c.env)
	url := fs.String("nats", natsURL(c.env), "NATS server URL (default $NATS_URL or nats://127.0.0.1:4222)")
	var projects stringList
	fs.Var(&projects, "project", "project to register the tools in (repeatable; default demo)")
	data := fs.String("data", "./utpmesh-worker-data", "directory for services that keep their own files")
	concurrency := fs.Int("concurrency", 16, "calls of one tool run at once by this process")
	instance := fs.String("instance", "", "instance id used in claims and logs (default host-pid-random)")
	drain := fs.Duration("drain-timeout", 30*time.Second, "on shutdown, how long calls in flight may take before they are canceled")
	lease := fs.Duration("claim-lease", worker.DefaultClaimLease, "execution claim lease: how long a dead worker can hold a call before another takes it over")
	ackWait := fs.Duration("ack-wait", worker.DefaultAckWait, "JetStream ack wait of the tool consumers: a dead worker's commands are redelivered this long after its last in-progress ack")
	maxDeliver := fs.Int("max-deliveries", 5, "deliveries of one command before the call fails with internal_error")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus /metrics and /healthz on HOST:PORT, e.g. 127.0.0.1:9465 (default off)")
	tlsCA := fs.String("tls-ca", c.env.getenv("NATS_CA"), "CA certificate (PEM) that signed the mesh's --tls-cert (default $NATS_CA)")
	credsFlag := fs.String("creds", c.env.getenv("NATS_CREDS"), "NATS credentials: the worker-<service>.nk seed file 'utpmesh up' wrote under DATA/creds, or a .creds file (default $NATS_CREDS; empty: connect without)")
	noGate := fs.Bool("no-gate", false, "run every call without the Cedar gate (logged as a warning); only for a mesh started without authorization, never for 'utpmesh up'")
	authzTTL := fs.Duration("authz-ttl", natsauthz.DefaultRemoteTTL, "how long the gate uses the policies, configs and issuer keys it read from the mesh before reading them again")
	otlp := fs.String("otlp-endpoint", "", "export OpenTelemetry traces with OTLP/HTTP to this URL, e.g. http://127.0.0.1:4318 (default $OTEL_EXPORTER_OTLP_ENDPOINT; empty: off)")
	configPath := fs.String("config", "", "YAML configuration file for the catalogues' outside world: ATP notification channels, OCTO suppliers, CyNodeAI egress (see docs/operations.md, Configuration file)")
	atlasState := fs.String("atlas-state", "bolt", "where ATLAS groups keep their data: bolt (a file under --data; one worker per group) or jetstream (a key-value bucket every worker of the group shares)")
	atlasReplicas := fs.Int("atlas-state-replicas", 1, "with --atlas-state jetstream: copies of the bucket (3 on a 3-node cluster)")
	atpState := fs.String("atp-state", "jetstream", "where atp keeps its data: jetstream (the key-value bucket atp_state, made by 'utpmesh up', that every atp worker shares) or bolt (a file under --data; one worker, on a mesh whose atp never used the bucket)")
	cynodeState := fs.String("cynode-state", "jetstream", "where cynode keeps its records and contents: jetstream (the key-value bucket cynode_state and object store cynode_blobs, made by 'utpmesh up', that every cynode worker shares) or bolt (a file and a directory under --data; one worker, on a mesh whose cynode never used the bucket)")
	var lf logFlags
	lf.register(fs)
	services, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(services) == 0 {
		return usagef("name at least one service to serve, e.g. 'utpmesh worker echo' (available: %s)", strings.Join(catalog.Names(), ", "))
	}
	if *concurrency < 1 {
		return usagef("--concurrency must be at least 1")
	}
	if *atlasState != "bolt" && *atlasState != "jetstream" {
		return usagef("--atlas-state %q: use bolt or jetstream", *atlasState)
	}
	if *atpState != "bolt" && *atpState != "jetstream" {
		return usagef("--atp-state %q: use jetstream or bolt", *atpState)
	}
	if *cynodeState != "bolt" && *cynodeState != "jetstream" {
		return usagef("--cynode-state %q: use jetstream or bolt", *cynodeState)
	}
	if *atlasReplicas < 1 || *atlasReplicas > 5 {
		return usagef("--atlas-state-replicas %d: use 1 (one server) or 3 (a 3-node cluster)", *atlasReplicas)
	}
	for _, s := range services {
		if _, err := catalog.Lookup(s); err != nil {
			return usagef("%v", err)
		}
	}
	log, err := lf.logger(c.env.stderr)
	if err != nil {
		return err
	}
	cfgFile, err := loadConfig(*configPath, services, log)
	if err != nil {
		return err
	}
	if len(projects) == 0 {
		projects = stringList{"demo"}
	}
	// Services that keep files own the data directory: lock it before
	// anything opens a file there (see docs/operations.md, data directory).
	stateDeps := catalog.Deps{AtlasState: *atlasState, AtlasStateReplicas: *atlasReplicas, ATPState: *atpState, CynodeState: *cynodeState}
	keepsFiles := false
	for _, s := range services {
		svc, _ := catalog.Lookup(s)
		keepsFiles = keepsFiles || svc.KeepsLocal(stateDeps)
	}
	if keepsFiles {
		lock, err := datalock.Acquire(*data, "utpmesh worker "+strings.Join(services, " "))
		if errors.Is(err, datalock.ErrInUse) {
			return fmt.Errorf("%w; stop it, or give this worker its own --data DIR", err)
		}
		if err != nil {
			return err
		}
		defer func() { _ = lock.Release() }()
	}
	if *metricsAddr != "" {
		if err := portcheck.Free(*metricsAddr); errors.Is(err, portcheck.ErrInUse) {
			return fmt.Errorf("metrics %w; pass another --metrics-addr (127.0.0.1:0 picks a free port)", err)
		}
	}
	if *authzTTL <= 0 {
		return usagef("--authz-ttl must be positive, e.g. 5s")
	}
	// The connection must never close for good while the worker runs: an
	// 'up' restarting answers "Authorization Violation" until it admits
	// the worker identities again, and nats.go gives up after the same
	// auth error twice unless told not to. Should it close all the same,
	// the worker exits non-zero, so a supervisor restarts it, instead of
	// serving nothing.
	connClosed := make(chan struct{})
	var closeOnce sync.Once
	connOpts := []nats.Option{nats.Name("utpmesh-worker"), nats.MaxReconnects(-1), nats.IgnoreAuthErrorAbort(),
		nats.ClosedHandler(func(*nats.Conn) { closeOnce.Do(func() { close(connClosed) }) })}
	if *tlsCA != "" {
		connOpts = append(connOpts, nats.RootCAs(*tlsCA))
	}
	credsFile, implicit := *credsFlag, false
	if credsFile == "" && len(services) == 1 {
		// On the mesh host: the identity a local 'utpmesh up' minted.
		if p := creds.SeedPath(defaultCredsDir, creds.WorkerName(services[0])); fileExists(p) {
			credsFile, implicit = p, true
		}
	}
	if credsFile != "" {
		opt, err := creds.Option(credsFile)
		if err != nil {
			return usagef("--creds: %v", err)
		}
		connOpts = append(connOpts, opt)
	}
	nc, err := connectRetry(ctx, *url, log, connOpts...)
	if implicit && errors.Is(err, nats.ErrNkeysNotSupported) {
		// The local mesh runs --insecure: the default credentials are
		// left over from an earlier run.
		nc, err = connectRetry(ctx, *url, log, connOpts[:len(connOpts)-1]...) // all but the credentials
	}
	if err != nil {
		return err
	}
	if nc == nil {
		return nil // interrupted before NATS was reachable
	}
	defer nc.Close()
	store, err := natsstore.NewClient(nc)
	if err != nil {
		return err
	}
	reg, err := natsreg.NewClient(nc)
	if err != nil {
		return err
	}
	// The services (their files, confirmation endpoints, scheduler) outlive
	// the signal: they stop after the drain, when svcCtx ends.
	svcCtx, stopServices := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServices()
	tools, err := catalog.Build(services, catalog.Deps{NC: nc, Store: store, Registry: reg, DataDir: *data, Context: svcCtx, Logger: log,
		AtlasState: *atlasState, AtlasStateReplicas: *atlasReplicas, ATPState: *atpState, CynodeState: *cynodeState, Config: cfgFile})
	if err != nil {
		return err
	}
	tp, err := telemetry.Setup(ctx, telemetry.Config{Endpoint: *otlp, ServiceName: "utpmesh-worker", ServiceVersion: Version, InstanceID: *instance, Getenv: c.env.getenv})
	if err != nil {
		return usagef("--otlp-endpoint: %v", err)
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	opts := []worker.Option{worker.WithStore(store), worker.WithRegistry(reg), worker.WithProjects(projects...),
		worker.WithInstanceID(*instance), worker.WithConcurrency(*concurrency), worker.WithLogger(log),
		worker.WithLeases(*lease, *ackWait, *maxDeliver), worker.WithServiceVersion(Version),
		worker.WithTracer(telemetry.NewWorkerTracer(tp))}
	if *noGate {
		log.Warn("--no-gate: the Cedar gate is off in this worker; every call it takes runs without authorization")
		opts = append(opts, worker.WithoutAuthorizer())
	} else {
		// The same gate as 'utpmesh up', reading the policies and issuer
		// keys from the mesh (fail closed: unreachable means auth_failed).
		g, err := natsauthz.NewRemoteGate(nc, natsauthz.RemoteConfig{TTL: *authzTTL, Logger: log.With("component", "authz")})
		if err != nil {
			return err
		}
		opts = append(opts, worker.WithAuthorizer(g))
	}
	var msrv *metrics.Server
	if *metricsAddr != "" {
		mx := metrics.New(Version)
		opts = append(opts, worker.WithObserver(mx.Worker()))
		if msrv, err = metrics.Serve(mx, metrics.ServerConfig{Addr: *metricsAddr, Logger: log}); err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		defer func() { _ = msrv.Shutdown(context.Background()) }()
	}
	rt, err := worker.Start(ctx, nc, tools, opts...)
	if err != nil {
		return err
	}
	var names []string
	for _, t := range rt.Tools() {
		names = append(names, t.Name)
	}
	fmt.Fprintf(c.env.stdout, "worker %s serving %s on %s\n", rt.InstanceID(), strings.Join(names, ", "), *url)
	if msrv != nil {
		fmt.Fprintf(c.env.stdout, "metrics at %s\n", msrv.URL())
	}
	select {
	case <-ctx.Done():
	case <-connClosed:
		log.Error("the NATS connection closed for good; exiting so that the worker is restarted")
		stopServices()
		return fmt.Errorf("worker: the NATS connection to %s closed and will not reconnect", *url)
	}
	sctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	if err := rt.Stop(sctx); err != nil && !errors.Is(err, worker.ErrDrainTimeout) {
		return err // ErrDrainTimeout: calls were canceled and reported, a clean stop
	}
	stopServices()
	return nc.Drain()
}

// Backoff of the worker's first connection: it doubles from
// connectBackoffMin up to connectBackoffMax.
const (
	connectBackoffMin = 250 * time.Millisecond
	connectBackoffMax = 5 * time.Second
)

// connectRetry connects to url, retrying with backoff (and a log line per
// failed attempt) while the server is not reachable yet, e.g. when the
// worker starts before 'utpmesh up'. Errors retrying cannot fix (a bad
// URL, refused credentials) return at once. It returns a nil connection
// and no error when ctx ends first.
func connectRetry(ctx context.Context, url string, log *slog.Logger, opts ...nats.Option) (*nats.Conn, error) {
	wait := connectBackoffMin
	for attempt := 1; ; attempt++ {
		nc, err := nats.Connect(url, opts...)
		if err == nil {
			if attempt > 1 {
				log.Info("connected to NATS", "url", url, "attempts", attempt)
			}
			return nc, nil
		}
		var nerr net.Error
		if errors.Is(err, nats.ErrNkeysNotSupported) {
			return nil, err // the caller may retry without credentials
		}
		if errors.Is(err, nats.ErrAuthorization) {
			return nil, fmt.Errorf("connect to NATS at %s: %w (the mesh requires this worker's credentials: pass --creds FILE or set $NATS_CREDS, e.g. DATA/creds/worker-<service>.nk of 'utpmesh up')", url, err)
		}
		if !errors.As(err, &nerr) && !errors.Is(err, nats.ErrNoServers) && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("connect to NATS at %s: %w (check --nats, e.g. nats://127.0.0.1:4222, and the credentials)", url, err)
		}
		log.Warn("NATS not reachable yet, retrying (is the mesh running? start it with 'utpmesh up')", "url", url, "attempt", attempt, "retry_in", wait, "err", err)
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(wait):
		}
		wait = min(2*wait, connectBackoffMax)
	}
}

// defaultCredsDir is where a local 'utpmesh up' with its default --data
// writes the identities' seeds.
const defaultCredsDir = creds.DefaultDir

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
