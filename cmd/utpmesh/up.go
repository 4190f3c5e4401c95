package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/internal/datalock"
	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/internal/portcheck"
	"github.com/utpmesh/utpmesh/pkg/apps/webui"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/retention"
	"github.com/utpmesh/utpmesh/pkg/telemetry"
	"github.com/utpmesh/utpmesh/pkg/worker"
	atptools "github.com/utpmesh/utpmesh/services/atp/tools"
	"github.com/utpmesh/utpmesh/services/catalog"
	"github.com/utpmesh/utpmesh/subjects"
)

type upCommand struct{ env env }

func (c *upCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("up", "utpmesh up [--data DIR] [--nats-listen HOST:PORT | --nats URL --creds FILE] [--project P]... [--services a,b] [--worker-identity SERVICE=TOOL[,TOOL...]]... [--agent-identity PROJECT/AGENT]... [--config FILE]", c.env)
	data := fs.String("data", "./utpmesh-data", "data directory: JetStream store and bbolt files (created if missing)")
	listen := fs.String("nats-listen", "127.0.0.1:4222", "NATS client address; port 0 picks a free port")
	var projects, services stringList
	fs.Var(&projects, "project", "project to register the tools in (repeatable; default demo)")
	fs.Var(&services, "services", "tool services to serve (comma-separated; default: "+strings.Join(defaultNames(), ",")+")")
	var extraIDs workerIdentities
	fs.Var(&extraIDs, "worker-identity", workerIdentityUsage)
	var agentIDs agentIdentities
	fs.Var(&agentIDs, "agent-identity", "make an identity agent-PROJECT.AGENT.nk for one agent of one project: it may dispatch only as AGENT and receive only its wakeups: PROJECT/AGENT (repeatable; docs/security.md)")
	drain := fs.Duration("drain-timeout", 30*time.Second, "on shutdown, how long calls in flight may take before they are canceled")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:9464", "serve Prometheus /metrics and /healthz on HOST:PORT (empty: off)")
	otlp := fs.String("otlp-endpoint", "", "export OpenTelemetry traces with OTLP/HTTP to this URL, e.g. http://127.0.0.1:4318 (default $OTEL_EXPORTER_OTLP_ENDPOINT; empty: off)")
	maxPayload := fs.Int("max-payload", embednats.DefaultMaxPayload, "NATS max message size in bytes (65536 to 67108864); must exceed --max-card-bytes by 64 KiB")
	maxCard := fs.Int("max-card-bytes", cardstore.DefaultMaxCardBytes, "largest card the CardStore accepts, in bytes (1 to 1048576)")
	linger := fs.Duration("dispatch-linger", mesh.DefaultDispatchLinger, "how long a new call's tool.call card commit waits for the call's result to share it (a single node with the embedded NATS server; 0: commit at once; at most 100ms)")
	uiListen := fs.String("ui-listen", "127.0.0.1:8080", "serve the web UI on HOST:PORT (empty: off; port 0 picks a free port)")
	uiToken := fs.String("ui-token", c.env.getenv("UTPMESH_UI_TOKEN"), "the web UI's access token (default $UTPMESH_UI_TOKEN, else the one kept in DATA/"+webui.TokenFile+", made at the first start; delete the file and restart to change it)")
	uiOpen := fs.Bool("ui-open", false, "serve the web UI without an access token (logged as a warning): anyone who can reach it can confirm, cancel and replay calls")
	tlsCert := fs.String("tls-cert", "", "require TLS on the NATS port with this certificate (PEM); clients pass --tls-ca")
	tlsKey := fs.String("tls-key", "", "the --tls-cert certificate's private key (PEM)")
	configPath := fs.String("config", "", "YAML configuration file for the catalogues' outside world: ATP notification channels, OCTO suppliers, CyNodeAI egress (see docs/operations.md, Configuration file)")
	insecure := fs.Bool("insecure", false, "no NATS authentication: anyone who reaches the NATS port may do anything (logged as a warning; default: nkey identities under DIR/creds)")
	var cf clusterFlags
	cf.register(fs)
	var xf externalFlags
	xf.register(fs)
	var lf logFlags
	lf.register(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q (up takes flags only; run 'utpmesh up --help')", pos[0])
	}
	log, lerr := lf.logger(c.env.stderr)
	if lerr != nil {
		return lerr
	}
	ext, err := xf.resolve(fs, &cf, *insecure, log)
	if err != nil {
		return err
	}
	if len(services) == 0 {
		services = defaultNames()
		if cf.state == "jetstream" || (cf.state == "" && cf.clusterName != "") {
			services = sharedDefaultNames()
		}
	}
	for _, s := range services {
		if _, err := catalog.Lookup(s); err != nil {
			return usagef("--services: %v", err)
		}
	}
	cl, err := cf.resolve(services)
	if err != nil {
		return err
	}
	cfgFile, err := loadConfig(*configPath, services, log)
	if err != nil {
		return err
	}
	atlasState, atlasReplicas := cf.atlasState(cl)
	if *insecure && len(agentIDs) > 0 {
		return usagef("--agent-identity needs NATS authentication: drop --insecure (a mesh without it has no identities to hand out)")
	}
	if *insecure && len(extraIDs) > 0 {
		return usagef("--worker-identity needs NATS authentication: drop --insecure (a mesh without it has no identities to hand out)")
	}
	if *maxPayload < embednats.MinMaxPayload || *maxPayload > embednats.MaxMaxPayload {
		return usagef("--max-payload %d: use %d (64 KiB) to %d (64 MiB) bytes", *maxPayload, embednats.MinMaxPayload, embednats.MaxMaxPayload)
	}
	if *maxCard < 1 || *maxCard > cardstore.DefaultMaxCardBytes {
		return usagef("--max-card-bytes %d: use 1 to %d bytes", *maxCard, cardstore.DefaultMaxCardBytes)
	}
	if *linger < 0 || *linger > boltstore.MaxDispatchLinger {
		return usagef("--dispatch-linger %v: use 0 (commit at once) to %v, e.g. --dispatch-linger 1ms", *linger, boltstore.MaxDispatchLinger)
	}
	dispatchLinger := *linger
	if dispatchLinger == 0 {
		dispatchLinger = -1 // mesh.Config: negative turns it off
	}
	// The data directory's lock is checked before any port: a second up
	// on the same directory is told which process holds it, not that the
	// first one's ports are taken. mesh.Start takes the lock for good.
	if lock, err := datalock.Acquire(*data, "utpmesh up"); errors.Is(err, datalock.ErrInUse) {
		return fmt.Errorf("%w; stop it, or pass --data with another directory", err)
	} else if err == nil {
		_ = lock.Release()
	}
	if *uiListen != "" {
		if err := portcheck.Free(*uiListen); errors.Is(err, portcheck.ErrInUse) {
			return fmt.Errorf("ui %v; is another 'utpmesh up' or 'utpmesh ui' running? pass --ui-listen 127.0.0.1:0 for a free port, or --ui-listen '' for no UI", err)
		} else if err != nil {
			return usagef("--ui-listen: %v", err)
		}
	}
	tp, err := telemetry.Setup(ctx, telemetry.Config{Endpoint: *otlp, ServiceName: "utpmesh-up", ServiceVersion: Version, Getenv: c.env.getenv})
	if err != nil {
		return usagef("--otlp-endpoint: %v", err)
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	// The tool services are built by the mesh once its data directory is
	// locked and its connection and CardStore exist; a start that fails
	// before that opens none of their files. They stop after the drain.
	var workerIDs []meshauth.Identity // one per tool service: what 'utpmesh worker --creds' may serve
	var credsLine string
	build := func(sctx context.Context, m *mesh.Mesh) ([]worker.Tool, error) {
		var tools []worker.Tool
		if ext != nil { // the replica count the mesh chose for the deployment
			atlasReplicas = m.Config().Replicated.Replicas
		}
		// The core makes every catalogue service's buckets, with the
		// mesh's replicas: worker identities manage no stream.
		replicas := max(atlasReplicas, 1)
		if err := m.Patiently(sctx, "catalogue buckets", func(c context.Context) error {
			return catalog.Provision(c, m.Conn(), replicas)
		}); err != nil {
			return nil, err
		}
		for _, s := range services {
			ts, err := catalog.Build([]string{s}, catalog.Deps{NC: m.Conn(), Store: m.Cards(), Registry: m.Registry(),
				DataDir: *data, Context: sctx, Logger: log, AtlasState: atlasState, AtlasStateReplicas: atlasReplicas,
				ATPStateReplicas: replicas, CynodeStateReplicas: replicas, Config: cfgFile})
			if err != nil {
				return nil, err
			}
			workerIDs = append(workerIDs, workerIdentity(s, ts))
			tools = append(tools, ts...)
		}
		// Admit the worker identities now, before the worker runtime
		// starts and logs "worker serving": the server reloads its users,
		// and a client that connected during a reload after that line
		// could be refused (found by make stress).
		var err error
		credsLine, err = setupIdentities(m, services, append(append(workerIDs, extraIDs...), agentIDs...))
		if err != nil {
			return nil, err
		}
		return tools, nil
	}
	var ids *mesh.IdentityConfig
	if ext != nil {
		*listen, *maxPayload = "", 0 // the deployment's
	} else if *insecure {
		log.Warn("--insecure: NATS authentication is off; anyone who reaches " + *listen + " may run tools, forge results and change policies")
	} else {
		ids = &mesh.IdentityConfig{Dir: cf.credsDir}
	}
	m, err := mesh.Start(ctx, mesh.Config{DataDir: *data, Listen: *listen, Projects: projects, Services: build, Logger: log,
		MetricsAddr: *metricsAddr, TracerProvider: tp, MaxPayload: int32(*maxPayload), MaxCardBytes: *maxCard,
		DispatchLinger: dispatchLinger,
		Worker:         worker.Config{ServiceVersion: Version}, Auth: &mesh.AuthConfig{Catalogues: authCatalogues(*data), KeyDir: cf.keysDir},
		Identities: ids, TLSCert: *tlsCert, TLSKey: *tlsKey, Command: "utpmesh up",
		ServerName: cl.serverName, Cluster: cl.cluster, Replicated: cl.replicated, External: ext,
		Markers: retention.MarkerConfig{Buckets: catalog.Buckets()}})
	if err != nil && ctx.Err() != nil {
		// Interrupted while starting: Start has stopped what it started.
		fmt.Fprintln(c.env.stdout, "stopped while starting")
		return nil
	}
	if err != nil {
		return err
	}
	// stopEarly stops a mesh that failed to finish starting, with the
	// same drain deadline as a normal stop: commands redelivered at start
	// may already be running.
	stopEarly := func() {
		sctx, cancel := context.WithTimeout(context.Background(), *drain)
		defer cancel()
		_ = m.Stop(sctx)
	}
	authLine, err := setupAuth(ctx, m)
	if err != nil {
		stopEarly()
		if ctx.Err() != nil {
			fmt.Fprintln(c.env.stdout, "stopped while starting")
			return nil
		}
		return err
	}
	cfg := m.Config()
	atpLine := ""
	if s := atptools.ServiceFor(*data); s != nil && slices.Contains(cfg.Projects, authz.DemoProject) {
		// The demo project gets the ATP fixture: activities and one booking in PRE_JOURNEY.
		b, err := s.LoadFixture(ctx, authz.DemoProject)
		if err != nil {
			stopEarly()
			return fmt.Errorf("atp demo fixture: %w", err)
		}
		atpLine = fmt.Sprintf("demo booking %s (%s): utpmesh atp booking get %s", b.ID, b.ToolState(), b.ID)
	}
	uiURL, stopUI := "", func() {}
	if *uiListen != "" {
		// The UI's confirm, cancel and replay run as the demo mandate's
		// agent when there is one (project demo); otherwise it reads only.
		tok, _ := os.ReadFile(filepath.Join(cfg.DataDir, authz.DemoMandateFile))
		// The access token outlives a restart (open tabs keep working):
		// it is kept in the data directory, readable by its owner only.
		accessToken := *uiToken
		if accessToken == "" && !*uiOpen {
			path := filepath.Join(cfg.DataDir, webui.TokenFile)
			var created bool
			if accessToken, created, err = webui.LoadToken(path); err != nil {
				stopEarly()
				return err
			}
			if created {
				log.Info("ui: new access token kept for the next starts; delete the file and restart to change it", "file", path)
			}
		}
		uiURL, stopUI, err = startUI(ctx, m.Conn(), uiConfig{Listen: *uiListen, Project: cfg.Projects[0],
			Version: cfg.ProtocolVersion, Token: accessToken, Open: *uiOpen, Mandate: strings.TrimSpace(string(tok)),
			Store: m.Cards(), Logger: log})
		if err != nil {
			stopEarly()
			return err
		}
	}
	fmt.Fprintf(c.env.stdout, "utpmesh %s is up\n", Version)
	fmt.Fprintf(c.env.stdout, "  NATS       %s\n", natsBanner(m))
	fmt.Fprintf(c.env.stdout, "  data       %s\n", cfg.DataDir)
	fmt.Fprintf(c.env.stdout, "  protocol   %s  (commands cg.%s.<project>.<channel>.cmd.>)\n", cfg.ProtocolVersion, cfg.ProtocolVersion)
	fmt.Fprintf(c.env.stdout, "  projects   %s\n", strings.Join(cfg.Projects, ", "))
	var names []string
	for _, t := range m.Runtime().Tools() {
		names = append(names, t.Name)
	}
	sort.Strings(names)
	fmt.Fprintf(c.env.stdout, "  tools      %s\n", strings.Join(names, ", "))
	fmt.Fprintf(c.env.stdout, "  services   cardstore, registry, inbox, authz (svc subjects)\n")
	fmt.Fprintf(c.env.stdout, "  auth       %s\n", authLine)
	fmt.Fprintf(c.env.stdout, "  creds      %s\n", credsLine)
	for _, l := range extraIDs.bannerLines(m.CredsDir()) {
		fmt.Fprintf(c.env.stdout, "  worker     %s\n", l)
	}
	if atpLine != "" {
		fmt.Fprintf(c.env.stdout, "  atp        %s\n", atpLine)
	}
	if u := m.MetricsURL(); u != "" {
		fmt.Fprintf(c.env.stdout, "  metrics    %s\n", u)
	}
	if tp.Enabled() {
		fmt.Fprintf(c.env.stdout, "  traces     OTLP/HTTP to %s\n", tp.Endpoint)
	}
	if uiURL != "" {
		fmt.Fprintf(c.env.stdout, "  ui         %s\n", uiURL)
	}
	fmt.Fprintf(c.env.stdout, "Press Ctrl-C to drain and stop.\n")
	// For supervisors and scripts that read the log: everything above
	// (identities, issuer keys, demo policy and mandate, fixtures) exists.
	log.Info("mesh ready", "nats", m.ClientURL(), "data", cfg.DataDir)

	<-ctx.Done()
	stopUI()
	fmt.Fprintf(c.env.stdout, "draining (up to %v)…\n", *drain)
	sctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	if err := m.Stop(sctx); err != nil {
		return fmt.Errorf("stopped with errors: %w", err)
	}
	fmt.Fprintln(c.env.stdout, "stopped")
	return nil
}

// sharedDefaultNames are the default services whose state every node of a
// cluster can share (or that keep none).
func sharedDefaultNames() []string {
	var out []string
	for _, s := range catalog.Default() {
		if !s.KeepsFiles || s.SharedState {
			out = append(out, s.Name)
		}
	}
	return out
}

func defaultNames() []string {
	var out []string
	for _, s := range catalog.Default() {
		out = append(out, s.Name)
	}
	return out
}

// workerIdentity is the worker identity of tool service name serving tools.
func workerIdentity(name string, tools []worker.Tool) meshauth.Identity {
	id := meshauth.Identity{Role: meshauth.RoleWorker, Service: name}
	if svc, err := catalog.Lookup(name); err == nil {
		if svc.Publish != nil {
			id.Publish = svc.Publish(subjects.DefaultVersion)
		}
		if svc.Subscribe != nil {
			id.Subscribe = svc.Subscribe(subjects.DefaultVersion)
		}
	}
	for _, t := range tools {
		target := t.Target
		if target == "" {
			target = t.Name
		}
		id.Tools = append(id.Tools, meshauth.Tool{Name: t.Name, Target: target})
	}
	return id
}

// setupIdentities admits a worker identity per tool service (those up
// serves, and the stateless ones it can describe without building them
// against the mesh) and says where the credentials are. "" ids: --insecure.
func setupIdentities(m *mesh.Mesh, served []string, ids []meshauth.Identity) (string, error) {
	if m.Config().Identities == nil && m.Config().External == nil {
		return "off (--insecure): anyone who reaches the NATS port may do anything", nil
	}
	have := map[string]bool{}
	for _, s := range served {
		have[s] = true
	}
	for _, s := range catalog.Names() {
		svc, _ := catalog.Lookup(s)
		if have[s] || svc.KeepsFiles {
			continue // a stateful service not served here is built only by its own worker
		}
		ts, err := svc.Build(catalog.Deps{})
		if err != nil {
			return "", fmt.Errorf("worker identity for %s: %w", s, err)
		}
		// Catalogue identities first, so that a --worker-identity that
		// overlaps one is the one refused.
		ids = append([]meshauth.Identity{workerIdentity(s, ts)}, ids...)
	}
	if err := checkToolsOwned(ids); err != nil {
		return "", err
	}
	if m.Config().External != nil {
		// The deployment's worker users find their durables made.
		if err := m.ExternalWorkers(ids...); err != nil {
			return "", err
		}
		return "the NATS deployment's users: one per process, each with its role's permissions ('utpmesh nats-permissions ROLE…'; docs/cluster.md)", nil
	}
	if err := m.AddIdentities(ids...); err != nil {
		return "", err
	}
	var names []string
	for _, id := range ids {
		names = append(names, id.Name())
	}
	m.Config().Logger.Info("NATS identities ready", "dir", m.CredsDir(), "workers", strings.Join(names, ","))
	return fmt.Sprintf("%s: hand out one file per process: admin.nk (admin work only), operator.nk (an operator: HEM decisions, policies, identities), agent-<project>.nk (agent runtimes), worker-<service>.nk ('utpmesh worker --creds FILE SERVICE'); docs/security.md", m.CredsDir()), nil
}
