// Package mesh assembles a whole mesh in one process: an embedded
// nats-server with JetStream, the CardStore, the tool registry and the inbox
// (each served over NATS), and a worker runtime with the PMO built-ins and the
// configured tool services. It is what `utpmesh up` runs and what end-to-end
// tests and benchmarks start.
//
// Data directory layout:
//
//	<DataDir>/jetstream/   JetStream streams (commands, events)
//	<DataDir>/cards.db     CardStore (bbolt)
//	<DataDir>/registry.db  tool registry (bbolt)
//	<DataDir>/inbox.db     inbox entries (bbolt)
//
// Stop shuts down in the order that loses nothing: stop taking new commands,
// drain the calls in flight (canceling what cannot finish by the deadline,
// which still writes and reports a result), stop the inbox, stop the svc
// servers, close the stores, and stop the broker last.
package mesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/registry/boltreg"
	"github.com/utpmesh/utpmesh/pkg/registry/natsreg"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/pmo"
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
	// Worker tunes the worker runtime (Store, Registry and Projects are set
	// by the mesh).
	Worker worker.Config
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Mesh is a running mesh.
type Mesh struct {
	cfg      Config
	srv      *embednats.Server
	nc       *nats.Conn
	cards    *boltstore.Store
	reg      *boltreg.Store
	cardSrv  *natsstore.Server
	regSrv   *natsreg.Server
	inbox    *inbox.Service
	rt       *worker.Runtime
	stoppers []func(context.Context) error
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
	host, port, err := splitListen(cfg.Listen)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("mesh: data directory: %w", err)
	}
	m = &Mesh{cfg: cfg}
	defer func() {
		if err != nil {
			_ = m.Stop(context.Background())
			m = nil
		}
	}()
	log := cfg.Logger

	m.srv, err = embednats.Start(embednats.Config{DataDir: cfg.DataDir, Host: host, Port: port, JetStream: true, Logger: log.With("component", "nats")})
	if err != nil {
		return m, err
	}
	m.push(m.srv.Shutdown)
	m.nc, err = m.srv.Connect(nats.Name("utpmesh-up"), nats.MaxReconnects(-1))
	if err != nil {
		return m, fmt.Errorf("mesh: connect: %w", err)
	}
	m.push(func(context.Context) error { m.nc.Close(); return nil })
	js, err := jetstream.New(m.nc)
	if err != nil {
		return m, fmt.Errorf("mesh: jetstream: %w", err)
	}
	if err = streams.Ensure(ctx, js, cfg.ProtocolVersion); err != nil {
		return m, err
	}

	m.cards, err = boltstore.Open(filepath.Join(cfg.DataDir, "cards.db"), boltstore.WithLogger(log.With("component", "cardstore")))
	if err != nil {
		return m, err
	}
	m.push(func(context.Context) error { return m.cards.Close() })
	m.reg, err = boltreg.Open(filepath.Join(cfg.DataDir, "registry.db"))
	if err != nil {
		return m, err
	}
	m.push(func(context.Context) error { return m.reg.Close() })

	m.cardSrv, err = natsstore.NewServer(m.nc, m.cards, natsstore.ServerConfig{Version: cfg.ProtocolVersion, Logger: log.With("component", "cardstore")})
	if err != nil {
		return m, err
	}
	m.push(m.cardSrv.Stop)
	m.regSrv, err = natsreg.NewServer(m.nc, m.reg, natsreg.ServerConfig{Version: cfg.ProtocolVersion, Logger: log.With("component", "registry")})
	if err != nil {
		return m, err
	}
	m.push(m.regSrv.Stop)

	m.inbox, err = inbox.New(m.nc, inbox.Config{Version: cfg.ProtocolVersion, Store: m.cards, Path: filepath.Join(cfg.DataDir, "inbox.db"), Logger: log})
	if err != nil {
		return m, err
	}
	if err = m.inbox.Start(ctx); err != nil {
		return m, err
	}
	m.push(m.inbox.Stop)

	wcfg := cfg.Worker
	wcfg.ProtocolVersion, wcfg.Store, wcfg.Registry, wcfg.Projects = cfg.ProtocolVersion, m.cards, m.reg, cfg.Projects
	if wcfg.Logger == nil {
		wcfg.Logger = log.With("component", "worker")
	}
	if wcfg.InstanceID == "" {
		host, _ := os.Hostname()
		wcfg.InstanceID = fmt.Sprintf("up-%s-%d", host, os.Getpid())
	}
	tools := append(pmo.Tools(pmo.Deps{NC: m.nc, Store: m.cards, Registry: m.reg, Holder: wcfg.InstanceID + "-pmo"}), cfg.Tools...)
	m.rt, err = worker.New(m.nc, wcfg, tools...)
	if err != nil {
		return m, err
	}
	if err = m.rt.Start(ctx); err != nil {
		return m, err
	}
	m.push(m.rt.Stop)
	return m, nil
}

func (m *Mesh) push(f func(context.Context) error) { m.stoppers = append(m.stoppers, f) }

// ClientURL is the NATS URL clients and remote workers connect to.
func (m *Mesh) ClientURL() string { return m.srv.ClientURL() }

// Conn is the mesh's own NATS connection.
func (m *Mesh) Conn() *nats.Conn { return m.nc }

// Cards is the mesh's CardStore.
func (m *Mesh) Cards() *boltstore.Store { return m.cards }

// Registry is the mesh's tool registry.
func (m *Mesh) Registry() *boltreg.Store { return m.reg }

// Runtime is the mesh's worker runtime.
func (m *Mesh) Runtime() *worker.Runtime { return m.rt }

// Config returns the mesh's effective configuration.
func (m *Mesh) Config() Config { return m.cfg }

// Stop shuts the mesh down in reverse start order (see the package doc). The
// worker gets ctx's deadline to drain; the rest stops promptly. Stop is
// idempotent.
func (m *Mesh) Stop(ctx context.Context) error {
	var errs []error
	for i := len(m.stoppers) - 1; i >= 0; i-- {
		if err := m.stoppers[i](ctx); err != nil {
			errs = append(errs, err)
			// Later stages get a fresh deadline: a slow drain must not
			// leave files unclosed.
			ctx = context.Background()
		}
	}
	m.stoppers = nil
	return errors.Join(errs...)
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
