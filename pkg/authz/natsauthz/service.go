package natsauthz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/registry"
)

// StartConfig configures Start.
type StartConfig struct {
	// DataDir holds keys/ unless KeyDir is set.
	DataDir string
	// KeyDir holds the projects' issuer keys; default <DataDir>/keys.
	KeyDir string
	// Registry lists a project's tools (queries, tests). Required.
	Registry registry.Registry
	// Store is the policy store to serve: boltpolicy on a single node,
	// jspolicy in a cluster. Required; the caller opens and closes it
	// (after Stop). (The caller opens
	// it, so that this package — which external workers import for
	// NewRemoteGate — carries no storage engine.)
	Store policystore.Store
	// Resources are the gate's and the querier's resource resolvers (the
	// catalogues' entity loaders); optional: without, the registered
	// catalogues are asked.
	Resources []authz.ResourceResolver
	// Version is the protocol version token.
	Version string
	Logger  *slog.Logger
	// OnConfig, when set, is called after every successful config change
	// of a project (config_put) with the config as stored: the hook that
	// reloads the agents' NATS permissions when a project opts into or
	// out of raw commands (authz.ProjectConfig.Commands).
	OnConfig func(project string, cfg authz.ProjectConfig)
}

// Service is the authorization layer of one mesh process: the policy
// store, the gate, the querier and the svc server.
type Service struct {
	Store   policystore.Store
	Keys    *mandate.KeyDir
	Gate    *authz.Gate
	Querier *authz.Querier
	srv     *Server
	audit   *Batcher
}

// Start serves the policy service of cfg.Store on nc.
// Policy sets are validated against the actions of the project's tools in
// cfg.Registry (and the registered catalogues' actions), so a typo'd
// action is refused.
func Start(ctx context.Context, nc *nats.Conn, cfg StartConfig) (*Service, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if cfg.DataDir == "" || cfg.Registry == nil || cfg.Store == nil {
		return nil, errors.New("natsauthz: StartConfig needs DataDir, Registry and Store (boltpolicy.Open on a single node, jspolicy in a cluster)")
	}
	if cfg.KeyDir == "" {
		cfg.KeyDir = filepath.Join(cfg.DataDir, "keys")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	st := cfg.Store
	// The gate decides every admitted call: its decision records leave in
	// batches (one message per subject and BatchConfig.Interval), since
	// the event stream fsyncs every message it stores.
	s := &Service{Store: st, Keys: mandate.NewKeyDir(cfg.KeyDir), audit: NewBatcher(nc, BatchConfig{Logger: cfg.Logger})}
	var err error
	s.Gate, err = authz.NewGate(authz.GateConfig{
		Policies: st, Keys: s.Keys, Resources: cfg.Resources,
		Audit: s.audit, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	s.Querier = &authz.Querier{Policies: st, Keys: s.Keys, Registry: cfg.Registry, Resources: cfg.Resources}
	s.srv, err = NewServer(nc, ServerConfig{Store: st, Gate: s.Gate, Querier: s.Querier, Registry: cfg.Registry, Keys: s.Keys, Version: cfg.Version, Logger: cfg.Logger,
		OnConfig: cfg.OnConfig})
	if err != nil {
		return nil, fmt.Errorf("natsauthz: %w", err)
	}
	return s, nil
}

// Stop stops the svc server and publishes the gate's pending decision
// records; the gate's later decisions, if any, are published one message
// each. The store is the caller's to close.
func (s *Service) Stop(ctx context.Context) error {
	return errors.Join(s.srv.Stop(ctx), s.audit.Close(ctx))
}
