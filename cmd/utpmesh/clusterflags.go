package main

import (
	"flag"
	"os"
	"strings"

	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/services/catalog"
)

// clusterFlags are up's flags for cluster mode: the embedded nats-server
// as one node of a NATS cluster, and the mesh state replicated in
// JetStream (docs/cluster.md).
type clusterFlags struct {
	serverName, clusterName, clusterListen, routes, secretFile, clusterCA string
	state                                                                 string
	replicas                                                              int
	credsDir, keysDir                                                     string
}

func (f *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.serverName, "server-name", "", "this node's name, unique in the cluster (default: the host name with --cluster-name, else utpmesh)")
	fs.StringVar(&f.clusterName, "cluster-name", "", "run the embedded nats-server as a node of this NATS cluster (with --routes); the mesh state is then replicated in JetStream")
	fs.StringVar(&f.clusterListen, "cluster-listen", "0.0.0.0:6222", "with --cluster-name: the route address the other nodes dial")
	fs.StringVar(&f.routes, "routes", "", "with --cluster-name: the route URLs of every node, this one included, comma-separated (nats-route://n1:6222,nats-route://n2:6222,nats-route://n3:6222)")
	fs.StringVar(&f.secretFile, "cluster-secret-file", "", "with --cluster-name: a file holding the routes' shared secret (at least 16 characters; the same on every node)")
	fs.StringVar(&f.clusterCA, "cluster-ca", "", "with --cluster-name and --tls-cert: the CA (PEM) that signed every node's certificate; routes then use mutual TLS")
	fs.StringVar(&f.state, "state", "", "where the mesh keeps its state: files (bbolt under --data; the single-node default) or jetstream (streams and key-value buckets with --replicas copies; the default with --cluster-name)")
	fs.IntVar(&f.replicas, "replicas", 0, "with --state jetstream: copies of every stream and bucket (default 3 with --cluster-name, else 1)")
	fs.StringVar(&f.credsDir, "creds-dir", "", "where the NATS identities' seeds are (default DATA/creds); in a cluster, the same files on every node")
	fs.StringVar(&f.keysDir, "keys-dir", "", "where the projects' mandate issuer keys are (default DATA/keys); in a cluster, the same files on every node")
}

// resolved is what the cluster flags mean for the mesh and its services.
type resolved struct {
	serverName string
	cluster    *embednats.Cluster
	replicated *mesh.ReplicatedConfig
}

// resolve checks the flags against each other and the services.
func (f *clusterFlags) resolve(services []string) (*resolved, error) {
	r := &resolved{serverName: f.serverName}
	if f.clusterName == "" {
		for name, set := range map[string]bool{"--routes": f.routes != "", "--cluster-secret-file": f.secretFile != "", "--cluster-ca": f.clusterCA != ""} {
			if set {
				return nil, usagef("%s needs --cluster-name (and --routes): e.g. --cluster-name mesh --routes nats-route://n1:6222,nats-route://n2:6222,nats-route://n3:6222", name)
			}
		}
	} else {
		if f.routes == "" {
			return nil, usagef("--cluster-name needs --routes with every node's route URL, e.g. --routes nats-route://n1:6222,nats-route://n2:6222,nats-route://n3:6222")
		}
		if r.serverName == "" {
			h, err := os.Hostname()
			if err != nil || h == "" {
				return nil, usagef("--cluster-name needs --server-name (the host name is unknown)")
			}
			r.serverName = strings.NewReplacer(".", "-", " ", "-").Replace(h)
		}
		c := &embednats.Cluster{Name: f.clusterName, Listen: f.clusterListen, CA: f.clusterCA}
		for _, u := range strings.Split(f.routes, ",") {
			if u = strings.TrimSpace(u); u != "" {
				c.Routes = append(c.Routes, u)
			}
		}
		if f.secretFile != "" {
			b, err := os.ReadFile(f.secretFile)
			if err != nil {
				return nil, usagef("--cluster-secret-file: %v", err)
			}
			c.Secret = strings.TrimSpace(string(b))
		}
		r.cluster = c
	}
	switch f.state {
	case "":
		if r.cluster != nil {
			f.state = "jetstream"
		} else {
			f.state = "files"
		}
	case "files", "jetstream":
	default:
		return nil, usagef("--state %q: use files or jetstream", f.state)
	}
	if f.state == "files" {
		if r.cluster != nil {
			return nil, usagef("--state files with --cluster-name: a cluster keeps its state in JetStream so every node sees it; drop --state or pass --state jetstream")
		}
		if f.replicas != 0 {
			return nil, usagef("--replicas needs --state jetstream")
		}
		return r, nil
	}
	if f.replicas < 0 || f.replicas > 5 {
		return nil, usagef("--replicas %d: use 1 (one server) or 3 (a 3-node cluster)", f.replicas)
	}
	r.replicated = &mesh.ReplicatedConfig{Replicas: f.replicas}
	for _, s := range services {
		svc, err := catalog.Lookup(s)
		if err != nil {
			return nil, usagef("--services: %v", err)
		}
		if svc.KeepsFiles && !svc.SharedState {
			return nil, usagef("--services %s: %s keeps its state in a local file, which the other nodes would not see; with --state jetstream serve it from one 'utpmesh worker %s' instead, and leave it out of --services", s, s, s)
		}
	}
	return r, nil
}

// atlasState is the ATLAS groups' state for the mesh's state.
func (f *clusterFlags) atlasState(r *resolved) (string, int) {
	if r.replicated == nil {
		return "", 0
	}
	n := r.replicated.Replicas
	if n == 0 {
		n = 1
		if r.cluster != nil {
			n = 3
		}
	}
	return "jetstream", n
}
