package mesh

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/embednats"
)

// ExternalConfig makes the mesh join a NATS deployment it does not run
// (Config.External): no embedded nats-server is started, the mesh's
// services connect to URL with Options, and the mesh's state lives in
// that deployment's JetStream (Config.Replicated is implied).
//
// The deployment owns the identities: the mesh mints no nkeys
// (Config.Identities must be nil) and the permissions of each role are
// the deployment's users' (docs/cluster.md, "Joining an existing NATS").
// The connection's user needs every subject of its account (the core
// role); give the mesh an account of its own.
type ExternalConfig struct {
	// URL lists the deployment's servers, comma-separated
	// (nats://n1:4222,nats://n2:4222). Required.
	URL string
	// Options authenticate the connection (pkg/creds: an nkey seed or a
	// .creds file of accounts/JWT) and set TLS; the mesh adds its name and
	// unlimited reconnects.
	Options []nats.Option
	// ConnectWait bounds how long Start retries a first connection that
	// fails because no server answers; default 30 s. An authorization
	// error fails at once.
	ConnectWait time.Duration
}

// Errors of joining an external NATS deployment (errors.Is).
var (
	// ErrExternal: Config.External is combined with a setting of the
	// embedded server, or the deployment lacks what the mesh needs
	// (JetStream, a large enough max_payload); the message says which and
	// what to change.
	ErrExternal = errors.New("mesh: external NATS")
)

// checkExternal refuses settings that belong to the embedded server.
func checkExternal(cfg Config) error {
	e := cfg.External
	if strings.TrimSpace(e.URL) == "" {
		return fmt.Errorf("%w: URL is empty: pass the deployment's servers, e.g. nats://n1:4222,nats://n2:4222,nats://n3:4222", ErrExternal)
	}
	for _, c := range []struct {
		set  bool
		what string
	}{
		{cfg.Identities != nil, "Identities (the mesh mints no nkeys on a deployment it does not run: map its roles onto the account's users, docs/cluster.md)"},
		{cfg.Cluster != nil, "Cluster (the deployment's servers are already clustered)"},
		{cfg.Listen != "", "Listen (no embedded server listens)"},
		{cfg.TLSCert != "" || cfg.TLSKey != "", "TLSCert/TLSKey (the deployment's servers hold their certificates)"},
		{cfg.MaxPayload != 0, "MaxPayload (the deployment's max_payload decides)"},
		{cfg.ServerName != "", "ServerName (no embedded server)"},
	} {
		if c.set {
			return fmt.Errorf("%w: %s cannot be combined with External", ErrExternal, c.what)
		}
	}
	return nil
}

// join connects the mesh to the external deployment of Config.External,
// checks that its account has JetStream and that its max_payload carries
// the largest card, and sets the replica count when none is configured:
// 3 when the server it reached is part of a cluster, else 1.
func (m *Mesh) join(ctx context.Context) error {
	if err := checkExternal(m.cfg); err != nil {
		return err
	}
	e := m.cfg.External
	opts := append([]nats.Option{nats.Name("utpmesh-up"), nats.MaxReconnects(-1)}, e.Options...)
	wait := e.ConnectWait
	if wait <= 0 {
		wait = 30 * time.Second
	}
	var nc *nats.Conn
	var err error
	for deadline := time.Now().Add(wait); ; {
		nc, err = nats.Connect(e.URL, opts...)
		if err == nil || !errors.Is(err, nats.ErrNoServers) || time.Now().After(deadline) {
			break
		}
		m.cfg.Logger.Info("waiting for the NATS deployment", "url", redactedURLs(e.URL), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		return fmt.Errorf("%w: connect to %s: %w (the credentials were refused: pass --creds with the core user's .creds or nkey seed of the mesh's account, docs/cluster.md)", ErrExternal, redactedURLs(e.URL), err)
	case err != nil:
		return fmt.Errorf("%w: connect to %s: %w (are the servers up and the URL right?)", ErrExternal, redactedURLs(e.URL), err)
	}
	m.nc, m.connOpts = nc, opts
	m.push(func(context.Context) error { nc.Close(); return nil })
	if err := checkLimits(int32(min(nc.MaxPayload(), int64(embednats.MaxMaxPayload))), m.cfg.MaxCardBytes); err != nil {
		return fmt.Errorf("%w: the server's max_payload: %w (set max_payload: 8MB in every server's configuration, or lower --max-card-bytes)", ErrExternal, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("%w: jetstream: %w", ErrExternal, err)
	}
	if err := m.checkJetStream(ctx, js); err != nil {
		return err
	}
	if m.cfg.Replicated == nil {
		m.cfg.Replicated = &ReplicatedConfig{}
	}
	if m.cfg.Replicated.Replicas == 0 {
		m.cfg.Replicated.Replicas = 1
		if nc.ConnectedClusterName() != "" {
			m.cfg.Replicated.Replicas = 3
		}
	}
	m.cfg.Logger.Info("joined the NATS deployment", "server", nc.ConnectedServerName(), "cluster", nc.ConnectedClusterName(),
		"replicas", m.cfg.Replicated.Replicas, "max_payload", nc.MaxPayload())
	return nil
}

// checkJetStream asks the account's JetStream for its limits: it must be
// on. While a cluster elects its meta leader the request can go
// unanswered; it is retried for up to clusterWait.
func (m *Mesh) checkJetStream(ctx context.Context, js jetstream.JetStream) error {
	wctx, cancel := context.WithTimeout(ctx, clusterWait)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(wctx, 10*time.Second)
		_, err := js.AccountInfo(actx)
		acancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
			return fmt.Errorf("%w: %w: the mesh keeps its state in JetStream: enable it on every server (jetstream { store_dir: … }) and for the mesh's account (jetstream: enabled, or nsc edit account --js-disk-storage -1 --js-mem-storage -1)", ErrExternal, err)
		case ctx.Err() != nil:
			return ctx.Err()
		case wctx.Err() != nil:
			return fmt.Errorf("%w: no JetStream answer within %v: %w (is a JetStream meta leader elected? are enough servers up?)", ErrExternal, clusterWait, err)
		}
		m.cfg.Logger.Info("waiting for the deployment's JetStream", "err", err)
		select {
		case <-wctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// ExternalWorkers makes, on the deployment the mesh joined
// (Config.External), the durables of the given worker identities' tools
// as pull consumers, as an embedded mesh does for the identities it
// admits: a worker user with the worker role's permissions can then only
// bind its durable, not make it a push consumer that delivers commands
// elsewhere (nats-server refuses to turn a pull consumer into a push
// one). Call it before handing out the workers' credentials; it mints
// nothing.
func (m *Mesh) ExternalWorkers(ids ...meshauth.Identity) error {
	if m.cfg.External == nil {
		return fmt.Errorf("%w: ExternalWorkers needs Config.External (an embedded mesh makes its identities' durables itself)", ErrExternal)
	}
	for _, id := range ids {
		if id.Role != meshauth.RoleWorker {
			return fmt.Errorf("%w: ExternalWorkers: %s is not a worker identity", ErrExternal, id.Name())
		}
	}
	return m.identityDurables(ids)
}

// redactedURLs is urls with every password masked, for logs and banners.
func redactedURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}

// externalHealth is /healthz's check of a mesh on an external deployment:
// its connection is up.
func (m *Mesh) externalHealth() error {
	if m.nc != nil && !m.nc.IsConnected() {
		return fmt.Errorf("not connected to the NATS deployment (%s)", m.nc.Status())
	}
	return nil
}
