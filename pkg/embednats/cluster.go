package embednats

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// MinClusterSize is the smallest cluster Start accepts: with JetStream's
// RAFT groups, 3 nodes are the fewest that keep a majority (2 of 3) when
// one is lost.
const MinClusterSize = 3

// RouteUser is the user name routes authenticate with when
// Cluster.Secret is set (the secret is its password).
const RouteUser = "utpmesh-route"

// minSecretLen is the shortest accepted Cluster.Secret.
const minSecretLen = 16

// Cluster makes the embedded server one node of a NATS cluster: it
// listens for routes from the other nodes on Listen and dials the nodes
// in Routes. Every node of a cluster has the same Name, the same Routes
// (with its own URL among them), the same Users, the same Secret or CA,
// and its own Config.ServerName and DataDir.
type Cluster struct {
	// Name of the cluster, the same on every node (letters, digits, '-'
	// and '_'). Required.
	Name string
	// Listen is the route address host:port other nodes dial; port -1
	// picks a free one. Required.
	Listen string
	// Routes are the route URLs (nats-route://host:port) of every node
	// of the cluster, this one's included (nats-server recognises and
	// skips its own). Their number is the cluster's size, from which
	// nats-server also sizes the JetStream meta group: at least
	// MinClusterSize.
	Routes []string
	// Secret, when set, authenticates routes: a node accepts a route only
	// with this secret (as the password of RouteUser) and sends it when
	// it dials. At least 16 characters. A cluster with Config.Users needs
	// Secret or TLS on routes; otherwise anyone who reaches the route
	// port joins the cluster and bypasses the users.
	Secret string
	// CA is the PEM file of the authority that signed every node's
	// certificate. With Config.TLSCert/TLSKey set, routes use mutual TLS
	// with that certificate (it must be valid for server and client
	// authentication and name the hosts in Routes) and accept only peers
	// whose certificate CA signed. Required with TLSCert; refused without.
	CA string
}

// tokenRE is what server, cluster and JetStream domain names may contain
// (nats-server refuses spaces; '.' would break subjects built from them).
var tokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// clusterOptions validates cfg.Cluster and sets the cluster part of opts.
// cfg.ServerName is as the caller gave it (no default applied yet).
func clusterOptions(cfg Config, opts *server.Options) error {
	c := cfg.Cluster
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: cluster: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	if cfg.ServerName == "" {
		return bad("every node needs its own ServerName, unique in the cluster (e.g. its host name: n1, n2, n3)")
	}
	if !tokenRE.MatchString(c.Name) {
		return bad("Name %q: give the cluster a name of letters, digits, '-' or '_', the same on every node (e.g. utpmesh)", c.Name)
	}
	host, port, err := listenAddr(c.Listen)
	if err != nil {
		return bad("Listen %q: %v; want host:port, e.g. 0.0.0.0:6222 (port -1 picks a free one)", c.Listen, err)
	}
	routes, err := routeURLs(c.Routes)
	if err != nil {
		return bad("%v", err)
	}
	if len(routes) < MinClusterSize {
		return bad("%d route(s) make a cluster of %d: JetStream needs %d nodes to keep a majority when one is lost; list the route URL of every node, this one's included (e.g. nats-route://n1:6222,nats-route://n2:6222,nats-route://n3:6222)",
			len(routes), len(routes), MinClusterSize)
	}
	if c.Secret != "" && len(c.Secret) < minSecretLen {
		return bad("Secret has %d characters: use at least %d (e.g. the output of 'openssl rand -hex 16')", len(c.Secret), minSecretLen)
	}
	if cfg.TLSCert != "" && c.CA == "" {
		return bad("TLS on routes needs the CA that signed every node's certificate: set CA (--cluster-ca FILE) besides the certificate")
	}
	if cfg.TLSCert == "" && c.CA != "" {
		return bad("CA %s without a certificate: routes use TLS only with TLSCert and TLSKey (--tls-cert, --tls-key) too", c.CA)
	}
	if len(cfg.Users) > 0 && c.Secret == "" && c.CA == "" {
		return bad("a cluster whose clients authenticate needs authenticated routes too, or anyone who reaches the route port joins the cluster and bypasses the users: set Secret (--cluster-secret-file) or TLS with a CA (--tls-cert, --tls-key, --cluster-ca)")
	}
	opts.Cluster.Name = c.Name
	opts.Cluster.Host = host
	opts.Cluster.Port = port
	if c.Secret != "" {
		opts.Cluster.Username, opts.Cluster.Password = RouteUser, c.Secret
		for _, u := range routes {
			u.User = url.UserPassword(RouteUser, c.Secret)
		}
	}
	if c.CA != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey, CaFile: c.CA, Verify: true})
		if err != nil {
			return bad("route TLS (certificate %s, key %s, CA %s): %v", cfg.TLSCert, cfg.TLSKey, c.CA, err)
		}
		// As nats-server's own config does for routes: strict mutual
		// verification, and the CA also verifies the nodes this one dials.
		tc.RootCAs = tc.ClientCAs
		opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = tc, 5
	}
	opts.Routes = routes
	return nil
}

// listenAddr splits host:port; port -1 means a free one.
func listenAddr(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < -1 || port == 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not 1-65535 or -1", p)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}

// routeURLs parses route URLs, refusing duplicates.
func routeURLs(in []string) ([]*url.URL, error) {
	seen := map[string]bool{}
	var out []*url.URL
	for _, r := range in {
		u, err := url.Parse(strings.TrimSpace(r))
		if err != nil || u.Scheme != "nats-route" || u.Hostname() == "" || u.Port() == "" {
			return nil, fmt.Errorf("route %q: want nats-route://host:port (e.g. nats-route://n2:6222)", r)
		}
		if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("route %q: port %q is not 1-65535", r, u.Port())
		}
		if seen[u.Host] {
			return nil, fmt.Errorf("route %s is listed twice: list every node once", u.Host)
		}
		seen[u.Host] = true
		out = append(out, &url.URL{Scheme: u.Scheme, Host: u.Host})
	}
	return out, nil
}

// ClusterURL is the nats-route:// URL of the address this node listens on
// for routes, with the port it got ("" when it is not a cluster node). A
// node listening on every interface (0.0.0.0, ::) shows as 127.0.0.1.
func (s *Server) ClusterURL() string {
	a := s.ns.ClusterAddr()
	if a == nil {
		return ""
	}
	host := a.IP.String()
	if a.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "nats-route://" + net.JoinHostPort(host, strconv.Itoa(a.Port))
}
