package cynode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/cynode/api"
	"github.com/utpmesh/utpmesh/services/cynode/artifact"
	"github.com/utpmesh/utpmesh/services/cynode/audit"
	"github.com/utpmesh/utpmesh/services/cynode/db"
	"github.com/utpmesh/utpmesh/services/cynode/git"
	"github.com/utpmesh/utpmesh/services/cynode/help"
	"github.com/utpmesh/utpmesh/services/cynode/internal/egress"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
	"github.com/utpmesh/utpmesh/services/cynode/internal/imagestore"
	"github.com/utpmesh/utpmesh/services/cynode/model"
	"github.com/utpmesh/utpmesh/services/cynode/node"
	"github.com/utpmesh/utpmesh/services/cynode/sandbox"
	"github.com/utpmesh/utpmesh/services/cynode/skills"
	"github.com/utpmesh/utpmesh/services/cynode/store"
	"github.com/utpmesh/utpmesh/services/cynode/web"
)

// Config is the gateway configuration (the data directory's cynode.json).
type Config = gateway.Config

// Agent is one agent registration of a Config.
type Agent = gateway.Agent

// Model is one entry of the model registry.
type Model = gateway.Model

// Limits are the size limits of a Config.
type Limits = gateway.Limits

// WebConfig configures web.fetch and web.search; WebPolicy is one
// project's fetch policy; SearchConfig the search provider.
type (
	WebConfig    = gateway.WebConfig
	WebPolicy    = gateway.WebPolicy
	SearchConfig = gateway.SearchConfig
)

// APIConfig declares api.call's providers; APIProvider, APIOperation and
// APICredential are its parts.
type (
	APIConfig     = gateway.APIConfig
	APIProvider   = gateway.APIProvider
	APIOperation  = gateway.APIOperation
	APICredential = gateway.APICredential
)

// SandboxConfig configures sandbox.*.
type SandboxConfig = gateway.SandboxConfig

// SandboxImage is an image of the sandboxes' local image store.
type SandboxImage = imagestore.Image

// GitConfig registers git.*'s repositories; GitRepo is one of them;
// GitForge is a repository's forge (github, gitea providers).
type (
	GitConfig = gateway.GitConfig
	GitRepo   = gateway.GitRepo
	GitForge  = gateway.GitForge
)

// Agent types.
const (
	PM      = gateway.PM
	PA      = gateway.PA
	Sandbox = gateway.Sandbox
)

// File names under the data directory: DBFile is the data file of an
// earlier version (imported once into the state engine, then renamed
// cynode.db.imported); the local state mode keeps StateFile and BlobDir.
const (
	DBFile     = store.LegacyFile
	ConfigFile = "cynode.json"
)

// ResolveFunc provides the NATS connection of a mesh that starts after the
// tools were built; it blocks until it exists or ctx ends.
type ResolveFunc func(ctx context.Context) (*nats.Conn, error)

// Deps are what the cynode service needs.
type Deps struct {
	// NC publishes the audit records and reaches the replicated state
	// (StateJetStream); Resolve provides it when nil (the state is then
	// opened on first use).
	NC      *nats.Conn
	Resolve ResolveFunc
	// DataDir holds cynode.json, the local state (StateBolt) and a
	// cynode.db left by an earlier version, which is imported once.
	// Required.
	DataDir string
	// State is where the service keeps its records and contents:
	// StateJetStream ("" too) or StateBolt.
	State string
	// StateReplicas is the replica count of the replicated state's bucket
	// and object store: 0 adopts what the mesh core made (a worker), 1 or
	// 3 (utpmesh up, which makes them).
	StateReplicas int
	// Cards is the mesh's CardStore, where the local state's holder lease
	// lives (package holder); nil: no lease is taken or checked.
	Cards cardstore.Store
	// Config, when set, is used instead of <DataDir>/cynode.json.
	Config *Config
	// Keys resolve mandate issuer keys; default the mesh's key directory
	// <DataDir>/keys (what utpmesh up uses).
	Keys mandate.KeyResolver
	// Context closes the store when it ends; nil: at process exit.
	Context context.Context
	// Node names this worker's sandbox node; "" reads (or generates)
	// <DataDir>/cynode-node (sandbox.NodeFile).
	Node   string
	Logger *slog.Logger
	// TestEgress lets tests reach their local servers (made-up host
	// names, exempt address:port pairs). Its type is internal to
	// services/cynode, so only this module's tests can set it; no
	// configuration file can.
	TestEgress *egress.Hooks
}

// DemoConfig is the configuration `utpmesh up` writes when the data
// directory has none: the demo agent (authz.DemoAgent) is a PM agent, the
// access policy permits every registered agent to invoke any tool its
// allowlist admits, and project demo has the task demo-task with job
// demo-job.
func DemoConfig() *Config {
	return &Config{
		Agents:         map[string]Agent{"demo-agent": {Type: PM, User: "demo-user"}},
		AccessPolicies: "@id(\"cynode-demo\")\npermit(principal, action == Action::\"mcp.tool.invoke\", resource);\n",
		Seed: gateway.Seed{
			Projects: []store.Project{{ID: "demo", Slug: "demo", DisplayName: "Demo project"}},
			Tasks:    []store.Task{{ID: "demo-task", ProjectID: "demo", Title: "Demo task", UserID: "demo-user"}},
			Jobs:     []store.Job{{ID: "demo-job", TaskID: "demo-task"}},
		},
	}
}

// LoadOrInitConfig reads <dataDir>/cynode.json, writing DemoConfig there
// first when it does not exist.
func LoadOrInitConfig(dataDir string) (*Config, error) {
	path := filepath.Join(dataDir, ConfigFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		raw, err := json.MarshalIndent(DemoConfig(), "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, append(raw, '\n'), 0o600); err != nil {
			return nil, fmt.Errorf("cynode: write the demo configuration %s: %w", path, err)
		}
	}
	return gateway.LoadConfig(path)
}

// Service is the running cynode service.
type Service struct {
	Store   store.Store
	gw      *gateway.Gateway
	sandbox *sandbox.Service
	tools   []worker.Tool
	closeMu sync.Once
}

// Tools are the service's worker tools.
func (s *Service) Tools() []worker.Tool { return s.tools }

// SandboxNode is the name of this worker's sandbox node.
func (s *Service) SandboxNode() string { return s.sandbox.Node() }

// Close closes the store and stops the sandbox node.
func (s *Service) Close() error {
	var err error
	s.closeMu.Do(func() {
		s.sandbox.Close()
		err = s.Store.Close()
	})
	return err
}

// ImportImage imports the images of an archive (a docker save tar file or
// an OCI image layout directory) into the sandboxes' local image store,
// <DataDir>/images; sandbox.create uses one once its ref is in the
// allowed images. What sandbox.images in cynode.json does at start.
func (s *Service) ImportImage(ctx context.Context, src string) ([]SandboxImage, error) {
	return s.sandbox.ImportImage(ctx, src)
}

// Specs are every tool of the catalogue (definitions: the web tools of
// Specs do not run; Open builds the running ones).
func Specs() []gateway.Spec { return specs(nil, nil, nil, nil) }

func specs(w *web.Service, a *api.Service, g *git.Service, sb *sandbox.Service) []gateway.Spec {
	var out []gateway.Spec
	out = append(out, artifact.Specs()...)
	out = append(out, db.Specs()...)
	out = append(out, model.Specs()...)
	out = append(out, skills.Specs()...)
	out = append(out, node.Specs()...)
	out = append(out, web.Specs(w)...)
	out = append(out, api.Specs(a)...)
	out = append(out, git.Specs(g)...)
	out = append(out, sandbox.Specs(sb)...)
	out = append(out, help.Specs(Specs)...)
	return out
}

// Open opens the store and builds the tools behind the gateway.
func Open(d Deps) (*Service, error) {
	if d.DataDir == "" {
		return nil, fmt.Errorf("cynode: no data directory: pass --data DIR (the service keeps %s and %s there)", DBFile, ConfigFile)
	}
	d, err := d.checkState()
	if err != nil {
		return nil, err
	}
	if d.NC == nil && d.Resolve == nil {
		return nil, errors.New("cynode: needs a NATS connection (or a Resolve function) to publish audit records")
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	d.Logger = d.Logger.With("service", "cynode")
	if err := os.MkdirAll(d.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("cynode: data directory: %w", err)
	}
	cfg := d.Config
	if cfg == nil {
		var err error
		if cfg, err = LoadOrInitConfig(d.DataDir); err != nil {
			return nil, err
		}
	}
	if d.Keys == nil {
		d.Keys = mandate.NewKeyDir(filepath.Join(d.DataDir, "keys"))
	}
	g, err := git.New(cfg.Git, d.DataDir)
	if err != nil {
		return nil, err
	}
	// A task that reaches a terminal status loses its git clones.
	log := d.Logger
	hook := func(_ context.Context, t store.Task) {
		if err := g.RemoveClones(t.ID); err != nil {
			log.Warn("cynode: removing the git clones of a finished task", "task_id", t.ID, "err", err)
		}
	}
	// Once the store is open (at once, or on first use when the mesh
	// comes later): the seed, and the clones of tasks that finished.
	ready := func(ctx context.Context, e *store.Engine) error {
		st := store.WithTaskHook(e, hook)
		if err := cfg.Seed.Apply(ctx, st); err != nil {
			return err
		}
		if ids, err := g.RemoveTerminalClones(ctx, st); err != nil {
			log.Warn("cynode: removing the git clones of finished tasks", "err", err)
		} else if len(ids) > 0 {
			log.Info("cynode: removed the git clones of finished tasks", "task_ids", ids)
		}
		return nil
	}
	opened, err := openStore(d, ready)
	if err != nil {
		return nil, err
	}
	st := store.WithTaskHook(opened, hook)
	conn := func(ctx context.Context) (*nats.Conn, error) {
		if d.NC != nil {
			return d.NC, nil
		}
		return d.Resolve(ctx)
	}
	var pubMu sync.Mutex
	var pub *audit.Publisher
	auditf := func(ctx context.Context, ver string, rec *audit.Record) error {
		pubMu.Lock()
		p := pub
		pubMu.Unlock()
		if p == nil {
			nc, err := conn(ctx)
			if err != nil {
				return err
			}
			np, err := audit.NewPublisher(nc)
			if err != nil {
				return err
			}
			pubMu.Lock()
			pub, p = np, np
			pubMu.Unlock()
		}
		return p.Publish(ctx, ver, rec)
	}
	gw, err := gateway.New(gateway.Options{Config: cfg, Keys: d.Keys, Store: st, Audit: auditf, Conn: conn, Logger: d.Logger})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	w, err := web.New(cfg.Web, d.TestEgress)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	a, err := api.New(cfg.API, d.DataDir, d.TestEgress)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	ictx := d.Context
	if ictx == nil {
		ictx = context.Background()
	}
	sb, err := sandbox.New(ictx, cfg.Sandbox, d.DataDir)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	// Its sandboxes are reached from every cynode worker (sandbox.Serve):
	// at once when the connection exists, else once the mesh is up.
	loc := sandbox.Locality{Conn: conn, Store: st, Node: d.Node, Logger: d.Logger}
	if d.NC != nil {
		err = sb.Serve(ictx, loc)
	} else {
		err = sb.ServeLater(ictx, loc)
	}
	if err != nil {
		sb.Close()
		_ = st.Close()
		return nil, err
	}
	s := &Service{Store: st, gw: gw, sandbox: sb}
	for _, sp := range specs(w, a, g, sb) {
		t, err := gw.Tool(sp)
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.tools = append(s.tools, t)
	}
	if ctx := d.Context; ctx != nil {
		go func() { <-ctx.Done(); _ = s.Close() }()
	}
	return s, nil
}

// Build is the catalogue factory: it opens the service and returns its
// tools; the store stays open for the life of the process (or Deps.Context).
func Build(d Deps) ([]worker.Tool, error) {
	s, err := Open(d)
	if err != nil {
		return nil, err
	}
	return s.Tools(), nil
}
