package main

import (
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/mesh"
)

// externalFlags are up's flags for joining a NATS deployment it does not
// run (docs/cluster.md, "Joining an existing NATS").
type externalFlags struct{ url, creds string }

func (f *externalFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "nats", "", "join this NATS deployment instead of embedding a nats-server: its servers' URLs, comma-separated; the state then lives in its JetStream (docs/cluster.md)")
	fs.StringVar(&f.creds, "creds", "", "with --nats: the mesh's core user's credentials, a .creds file (accounts/JWT) or an nkey seed")
}

// embeddedOnly are up's flags that configure the embedded nats-server or
// mint identities, with what to do instead when joining a deployment.
var embeddedOnly = []struct{ flag, instead string }{
	{"nats-listen", "set the listen address on the deployment's servers"},
	{"tls-cert", "the deployment's servers hold their certificates"},
	{"tls-key", "the deployment's servers hold their certificates"},
	{"max-payload", "set max_payload on the deployment's servers (8MB: the card limit plus 64 KiB)"},
	{"server-name", "no nats-server runs in this process"},
	{"cluster-name", "the deployment's servers are clustered already"},
	{"cluster-listen", "the deployment's servers are clustered already"},
	{"routes", "the deployment's servers are clustered already"},
	{"cluster-secret-file", "the deployment's servers are clustered already"},
	{"cluster-ca", "the deployment's servers are clustered already"},
	{"creds-dir", "up mints no nkeys on a deployment it does not run: each process gets a user of the mesh's account; 'utpmesh nats-permissions ROLE…' prints each role's permissions (docs/cluster.md)"},
	{"worker-identity", "up mints no nkeys on a deployment it does not run: add a user worker-SERVICE to the mesh's account with the permissions 'utpmesh nats-permissions worker-SERVICE=TOOL[,TOOL...]' prints (docs/cluster.md)"},
}

// resolve returns the deployment to join, or nil without --nats. It
// refuses the flags of the embedded server and identities, and --state
// files.
func (f *externalFlags) resolve(fs *flag.FlagSet, cf *clusterFlags, insecure bool, log *slog.Logger) (*mesh.ExternalConfig, error) {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if f.url == "" {
		if set["creds"] {
			return nil, usagef("--creds needs --nats: it is the credentials up joins an existing NATS deployment with (e.g. --nats nats://n1:4222,nats://n2:4222,nats://n3:4222 --creds core.creds)")
		}
		return nil, nil
	}
	for _, e := range embeddedOnly {
		if set[e.flag] {
			return nil, usagef("--%s with --nats: %s; drop --%s", e.flag, e.instead, e.flag)
		}
	}
	switch cf.state {
	case "", "jetstream":
		cf.state = "jetstream"
	default:
		return nil, usagef("--state %s with --nats: the mesh keeps its state in the deployment's JetStream; drop --state", cf.state)
	}
	ext := &mesh.ExternalConfig{URL: f.url}
	switch {
	case f.creds != "":
		opt, err := creds.Option(f.creds)
		if err != nil {
			return nil, usagef("--creds: %v", err)
		}
		ext.Options = []nats.Option{opt}
	case insecure:
		log.Warn("--insecure with --nats: joining " + f.url + " without a credentials file (only what the URL carries)")
	default:
		return nil, usagef("--nats needs --creds FILE: the core user of the mesh's account (a .creds file or an nkey seed; docs/cluster.md), or --insecure to connect without one")
	}
	for _, u := range strings.Split(f.url, ",") {
		if strings.TrimSpace(u) == "" {
			return nil, usagef("--nats %q has an empty URL between commas; want nats://n1:4222,nats://n2:4222", f.url)
		}
	}
	return ext, nil
}

// natsBanner is up's NATS line: the embedded server, or the deployment
// joined and the replica count of the state.
func natsBanner(m *mesh.Mesh) string {
	cfg := m.Config()
	if cfg.External == nil {
		return m.ClientURL() + " (JetStream, fsync before ack)"
	}
	return fmt.Sprintf("%s (joined: the mesh's state in its JetStream, %d replicas)", m.ClientURL(), cfg.Replicated.Replicas)
}
