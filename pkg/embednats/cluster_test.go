package embednats_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/utpmesh/utpmesh/pkg/embednats"
)

var threeRoutes = []string{"nats-route://127.0.0.1:16222", "nats-route://127.0.0.1:16223", "nats-route://127.0.0.1:16224"}

// Bad cluster configurations are refused before anything starts, with a
// message naming the field and what to give instead.
func TestClusterConfigRefused(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	node := func(edit func(*embednats.Config)) embednats.Config {
		cfg := embednats.Config{Port: -1, ServerName: "n1", Cluster: &embednats.Cluster{
			Name: "mesh", Listen: "127.0.0.1:-1", Routes: slices.Clone(threeRoutes),
		}}
		edit(&cfg)
		return cfg
	}
	tests := []struct {
		name string
		cfg  embednats.Config
		want string
	}{
		{"no server name", node(func(c *embednats.Config) { c.ServerName = "" }), "every node needs its own ServerName"},
		{"server name with a space", node(func(c *embednats.Config) { c.ServerName = "node one" }), `ServerName "node one": use letters`},
		{"no cluster name", node(func(c *embednats.Config) { c.Cluster.Name = "" }), `Name "": give the cluster a name`},
		{"listen without port", node(func(c *embednats.Config) { c.Cluster.Listen = "127.0.0.1" }), `Listen "127.0.0.1"`},
		{"listen port 0", node(func(c *embednats.Config) { c.Cluster.Listen = "127.0.0.1:0" }), `port "0" is not 1-65535 or -1`},
		{"cluster of 2", node(func(c *embednats.Config) { c.Cluster.Routes = threeRoutes[:2] }), "2 route(s) make a cluster of 2: JetStream needs 3 nodes"},
		{"cluster of 1", node(func(c *embednats.Config) { c.Cluster.Routes = threeRoutes[:1] }), "make a cluster of 1"},
		{"route not nats-route", node(func(c *embednats.Config) { c.Cluster.Routes[1] = "nats://127.0.0.1:16223" }), `route "nats://127.0.0.1:16223": want nats-route://host:port`},
		{"route without port", node(func(c *embednats.Config) { c.Cluster.Routes[1] = "nats-route://n2" }), "want nats-route://host:port"},
		{"route listed twice", node(func(c *embednats.Config) { c.Cluster.Routes[2] = c.Cluster.Routes[0] }), "route 127.0.0.1:16222 is listed twice"},
		{"short secret", node(func(c *embednats.Config) { c.Cluster.Secret = "hunter2" }), "Secret has 7 characters: use at least 16"},
		{"certificate without CA", node(func(c *embednats.Config) { c.TLSCert, c.TLSKey = "node.pem", "node-key.pem" }), "TLS on routes needs the CA"},
		{"CA without certificate", node(func(c *embednats.Config) { c.Cluster.CA = "ca.pem" }), "CA ca.pem without a certificate"},
		{"users, routes open", node(func(c *embednats.Config) { c.Users = []embednats.User{{Nkey: pub, Name: "admin"}} }), "needs authenticated routes too"},
		{"domain with a dot", node(func(c *embednats.Config) { c.JetStream, c.DataDir, c.JetStreamDomain = true, t.TempDir(), "eu.west" }), `JetStreamDomain "eu.west"`},
		{"domain without JetStream", node(func(c *embednats.Config) { c.JetStreamDomain = "hub" }), "needs JetStream on"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := embednats.Start(tc.cfg)
			if err == nil {
				_ = srv.Shutdown(context.Background())
				t.Fatal("Start succeeded")
			}
			if !errors.Is(err, embednats.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start = %v\nwant ErrInvalidConfig containing %q", err, tc.want)
			}
		})
	}
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	return out
}

// cluster starts three nodes with the given route ports and per-node
// configuration; they stop when the test ends. A port picked free can be
// taken by another test's socket before its node binds it: then cluster
// picks new ports, writing them into ports (the caller's slice sees
// them), and starts again, up to three times.
func cluster(t *testing.T, ports []int, edit func(i int, c *embednats.Config)) []*embednats.Server {
	t.Helper()
	for attempt := 1; ; attempt++ {
		srvs, err := startNodes(ports, edit)
		if err == nil {
			for _, srv := range srvs {
				t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
			}
			return srvs
		}
		if !errors.Is(err, embednats.ErrAddrInUse) || attempt == 3 {
			t.Fatal(err)
		}
		copy(ports, freePorts(t, len(ports)))
	}
}

// startNodes starts a node per route port; on an error it stops the ones
// it started.
func startNodes(ports []int, edit func(i int, c *embednats.Config)) ([]*embednats.Server, error) {
	var routes []string
	for _, p := range ports {
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(p))
	}
	var out []*embednats.Server
	for i, p := range ports {
		cfg := embednats.Config{Port: -1, ServerName: "n" + strconv.Itoa(i), Cluster: &embednats.Cluster{
			Name: "mesh", Listen: "127.0.0.1:" + strconv.Itoa(p), Routes: routes,
		}}
		edit(i, &cfg)
		srv, err := embednats.Start(cfg)
		if err != nil {
			for _, s := range out {
				_ = s.Shutdown(context.Background())
			}
			return nil, fmt.Errorf("node %d: %w", i, err)
		}
		out = append(out, srv)
	}
	return out, nil
}

// waitRouted waits until every server has a route to each of the others.
func waitRouted(t *testing.T, srvs []*embednats.Server) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i, s := range srvs {
		for {
			rz, err := s.NATS().Routez(&server.RoutezOptions{})
			if err != nil {
				t.Fatal(err)
			}
			peers := map[string]bool{}
			for _, r := range rz.Routes {
				peers[r.RemoteName] = true
			}
			if len(peers) == len(srvs)-1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d is routed to %v, want the %d others", i, peers, len(srvs)-1)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// logWatch is a slog.Logger whose records are searched for a text.
type logWatch struct {
	w *syncWriter
}

func newLogWatch() (*logWatch, *slog.Logger) {
	w := &syncWriter{w: &strings.Builder{}}
	return &logWatch{w: w}, slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// wait waits until the log contains text.
func (l *logWatch) wait(t *testing.T, text string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(l.w.String(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("log never said %q:\n%s", text, l.w.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// With a Secret, nodes that share it form the cluster, and a node with
// another secret is refused by the nodes it dials. The nodes admit the
// same nkey users, and a user's messages cross the routes.
func TestClusterSecret(t *testing.T) {
	const secret = "0123456789abcdef0123"
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	ports := freePorts(t, 4)
	srvs := cluster(t, ports[:3], func(_ int, c *embednats.Config) {
		c.Cluster.Secret = secret
		c.Users = []embednats.User{{Nkey: pub, Name: "admin"}}
	})
	waitRouted(t, srvs)

	auth, err := nats.NkeyOptionFromSeed(writeSeed(t, seed))
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(srvs[1].ClientURL()); err == nil {
		nc.Close()
		t.Fatal("a client without credentials connected to a node")
	}
	responder, err := nats.Connect(srvs[2].ClientURL(), auth)
	if err != nil {
		t.Fatal(err)
	}
	defer responder.Close()
	if _, err := responder.Subscribe("ping", func(m *nats.Msg) { _ = m.Respond([]byte("pong from n2")) }); err != nil {
		t.Fatal(err)
	}
	requester, err := nats.Connect(srvs[0].ClientURL(), auth)
	if err != nil {
		t.Fatal(err)
	}
	defer requester.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// No responders until n2's subscription has reached n0.
		reply, err := requester.Request("ping", nil, time.Second)
		if err == nil {
			if string(reply.Data) != "pong from n2" {
				t.Fatalf("reply %q", reply.Data)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("request from n0 to a subscriber on n2: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := srvs[0].ClusterURL(); got != "nats-route://127.0.0.1:"+strconv.Itoa(ports[0]) {
		t.Fatalf("ClusterURL = %q", got)
	}

	watch, logger := newLogWatch()
	intruder, err := embednats.Start(embednats.Config{Port: -1, ServerName: "x", Logger: logger, Cluster: &embednats.Cluster{
		Name: "mesh", Listen: "127.0.0.1:" + strconv.Itoa(ports[3]), Secret: "not-the-secret-at-all",
		Routes: []string{"nats-route://127.0.0.1:" + strconv.Itoa(ports[0]), "nats-route://127.0.0.1:" + strconv.Itoa(ports[1]), "nats-route://127.0.0.1:" + strconv.Itoa(ports[3])},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Shutdown(context.Background())
	watch.wait(t, "Route Error 'Authorization Violation'")
	noRouteFrom(t, srvs, "x")
}

// noRouteFrom fails the test when a server has a route to server name.
func noRouteFrom(t *testing.T, srvs []*embednats.Server, name string) {
	t.Helper()
	for i, s := range srvs {
		rz, err := s.NATS().Routez(&server.RoutezOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rz.Routes {
			if r.RemoteName == name {
				t.Fatalf("node %d accepted a route from %s", i, name)
			}
		}
	}
}

// With a certificate and a CA, routes use mutual TLS: nodes with
// certificates of that CA form the cluster; a node whose certificate
// another CA signed is refused.
func TestClusterTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "ca")
	other := newCA(t, dir, "other")
	cert, key := ca.issue(t, dir, "node")
	badCert, badKey := other.issue(t, dir, "bad")

	ports := freePorts(t, 4)
	srvs := cluster(t, ports[:3], func(_ int, c *embednats.Config) {
		c.TLSCert, c.TLSKey, c.Cluster.CA = cert, key, ca.file
	})
	waitRouted(t, srvs)

	watch, logger := newLogWatch()
	intruder, err := embednats.Start(embednats.Config{Port: -1, ServerName: "x", Logger: logger, TLSCert: badCert, TLSKey: badKey, Cluster: &embednats.Cluster{
		// It trusts the cluster's CA; the cluster must refuse its certificate.
		Name: "mesh", Listen: "127.0.0.1:" + strconv.Itoa(ports[3]), CA: ca.file,
		Routes: []string{"nats-route://127.0.0.1:" + strconv.Itoa(ports[0]), "nats-route://127.0.0.1:" + strconv.Itoa(ports[1]), "nats-route://127.0.0.1:" + strconv.Itoa(ports[3])},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Shutdown(context.Background())
	watch.wait(t, "TLS route handshake error: remote error: tls: bad certificate")
	noRouteFrom(t, srvs, "x")
}

// testCA is a throw-away certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	file := filepath.Join(dir, name+".pem")
	writePEM(t, file, "CERTIFICATE", der)
	return &testCA{cert: cert, key: key, file: file}
}

// issue signs a certificate for 127.0.0.1 valid for server and client
// authentication (a route is both) and returns its and its key's files.
func (ca *testCA) issue(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

func writeSeed(t *testing.T, seed []byte) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(file, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func writePEM(t *testing.T, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(fmt.Errorf("write %s: %w", file, err))
	}
}

// A route port another socket holds fails the start at once, naming it.
func TestClusterPortInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	_, err = embednats.Start(embednats.Config{Port: -1, ServerName: "n1", ReadyTimeout: 10 * time.Minute, Cluster: &embednats.Cluster{
		Name: "mesh", Listen: addr, Routes: threeRoutes,
	}})
	if want := "cluster: listen " + addr + ": address already in use"; !errors.Is(err, embednats.ErrAddrInUse) || err.Error() != want {
		t.Fatalf("Start = %v, want %q", err, want)
	}
}

// JetStreamDomain names the domain clients see in their account info.
func TestJetStreamDomain(t *testing.T) {
	srv, err := embednats.Start(embednats.Config{Port: -1, JetStream: true, DataDir: t.TempDir(), JetStreamDomain: "hub"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ai, err := js.AccountInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ai.Domain != "hub" {
		t.Fatalf("account info domain %q, want hub", ai.Domain)
	}
}

// TestClusterHelperPicksOtherPorts: when a route port picked free is
// taken before its node binds it (another test's socket), the cluster
// helper starts on other ports instead of failing the test.
func TestClusterHelperPicksOtherPorts(t *testing.T) {
	ports := freePorts(t, 3)
	taken := ports[1]
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(taken))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srvs := cluster(t, ports, func(int, *embednats.Config) {})
	waitRouted(t, srvs)
	if ports[1] == taken {
		t.Fatalf("the cluster kept route port %d, which another socket holds", taken)
	}
}
