// Package externaltest starts, for tests, a NATS deployment the mesh does
// not run: one or three nats-servers (a cluster on loopback random ports)
// with JetStream in a domain, configured from configuration files as an
// operator would write them, and the mesh's account with one user per
// role. Users are nkey users of the configuration file (their seeds in
// <name>.nk) or, in JWT mode, users of an operator/account hierarchy
// (their .creds files); their permissions are rendered by pkg/mesh/natsconf.
package externaltest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/utpmesh/utpmesh/pkg/mesh/natsconf"
)

// Account is the name of the mesh's account in the configuration-file
// mode; Domain the JetStream domain of every server.
const (
	Account = "MESH"
	Domain  = "corp"
)

// Options configure a deployment.
type Options struct {
	// Nodes is 1 (one server, no cluster) or 3; default 3.
	Nodes int
	// JWT makes the servers trust an operator whose account holds the
	// users (accounts/JWT, .creds files); false: nkey users in the
	// configuration file (seed files).
	JWT bool
	// Users are the account's users, Nkey left empty: Start makes a key
	// per user.
	Users []natsconf.User
	// Permissions, when set, gives each user's permissions once its key
	// is made (for permissions that name the key, such as a per-identity
	// reply-inbox prefix); it replaces User.Permissions.
	Permissions func(name, nkey string) (*server.Permissions, error)
	// MaxPayload is every server's max_payload; default 8 MiB.
	MaxPayload int
	// MaxControlLine is every server's max_control_line, which must hold
	// a client's CONNECT with its user JWT (5.2 KB for worker-atlas_tasks
	// on 2026-11-26): default 32 KiB in JWT mode, else the server's 4 KiB;
	// -1: the server's default in either mode.
	MaxControlLine int
	// NoJetStream starts the servers without JetStream (one node only).
	NoJetStream bool
	// Open: no accounts and no users, anyone may connect (JetStream in
	// the global account); Users and JWT are ignored.
	Open bool
}

// Deployment is a running deployment.
type Deployment struct {
	t       testing.TB
	dir     string
	opts    Options
	urls    []string
	confs   []string
	servers []*server.Server
	creds   map[string]string
}

// Start starts the deployment and returns once every server has JetStream
// current with its meta leader; t.Cleanup stops it.
func Start(t testing.TB, o Options) *Deployment {
	t.Helper()
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Nodes != 1 && o.Nodes != 3 || o.NoJetStream && o.Nodes != 1 {
		t.Fatalf("externaltest: Nodes %d (NoJetStream %v): want 1 or 3, and 1 without JetStream", o.Nodes, o.NoJetStream)
	}
	if o.MaxPayload == 0 {
		o.MaxPayload = 8 << 20
	}
	if o.MaxControlLine == 0 && o.JWT {
		o.MaxControlLine = 32 << 10
	}
	d := &Deployment{t: t, dir: t.TempDir(), opts: o, creds: map[string]string{}}
	accounts := d.accounts()
	var clientAddrs, routeAddrs []string
	for range o.Nodes {
		clientAddrs = append(clientAddrs, freeAddr(t))
		routeAddrs = append(routeAddrs, freeAddr(t))
	}
	for i := range o.Nodes {
		var b strings.Builder
		fmt.Fprintf(&b, "server_name: n%d\nlisten: %q\nmax_payload: %d\n", i, clientAddrs[i], o.MaxPayload)
		if o.MaxControlLine > 0 {
			fmt.Fprintf(&b, "max_control_line: %d\n", o.MaxControlLine)
		}
		if !o.NoJetStream {
			fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n  domain: %s\n  sync_interval: always\n}\n", filepath.Join(d.dir, fmt.Sprintf("n%d", i)), Domain)
		}
		if o.Nodes > 1 {
			var routes []string
			for _, a := range routeAddrs {
				routes = append(routes, strconv.Quote("nats-route://route:a-route-secret-for-tests@"+a))
			}
			fmt.Fprintf(&b, "cluster {\n  name: %s\n  listen: %q\n  authorization { user: route, password: a-route-secret-for-tests }\n  routes: [%s]\n}\n",
				Domain, routeAddrs[i], strings.Join(routes, ", "))
		}
		b.WriteString(accounts)
		conf := filepath.Join(d.dir, fmt.Sprintf("n%d.conf", i))
		if err := os.WriteFile(conf, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		d.confs = append(d.confs, conf)
		d.urls = append(d.urls, "nats://"+clientAddrs[i])
	}
	t.Cleanup(d.Stop)
	d.servers = make([]*server.Server, o.Nodes)
	for i := range o.Nodes {
		d.start(i)
	}
	if !o.NoJetStream {
		d.waitCurrent()
	}
	return d
}

// accounts makes every key and returns the configuration's account part.
func (d *Deployment) accounts() string {
	t := d.t
	if d.opts.Open {
		return ""
	}
	users := make([]natsconf.User, len(d.opts.Users))
	seeds := map[string][]byte{}
	for i, u := range d.opts.Users {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		u.Nkey, _ = kp.PublicKey()
		seeds[u.Name], _ = kp.Seed()
		if d.opts.Permissions != nil {
			if u.Permissions, err = d.opts.Permissions(u.Name, u.Nkey); err != nil {
				t.Fatalf("externaltest: permissions of %s: %v", u.Name, err)
			}
		}
		users[i] = u
	}
	if !d.opts.JWT {
		var b strings.Builder
		if err := natsconf.Conf(&b, Account, users); err != nil {
			t.Fatal(err)
		}
		for _, u := range users {
			d.creds[u.Name] = d.write(u.Name+".nk", append(seeds[u.Name], '\n'))
		}
		return b.String()
	}
	op, _ := nkeys.CreateOperator()
	opPub, _ := op.PublicKey()
	sys, _ := nkeys.CreateAccount()
	sysPub, _ := sys.PublicKey()
	acc, _ := nkeys.CreateAccount()
	accPub, _ := acc.PublicKey()
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name, oc.SystemAccount = "corp", sysPub
	opJWT, err := oc.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	ac := jwt.NewAccountClaims(accPub)
	ac.Name = Account
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{DiskStorage: -1, MemoryStorage: -1, Streams: -1, Consumer: -1}
	accJWT, err := ac.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		uc, err := natsconf.UserClaims(u)
		if err != nil {
			t.Fatal(err)
		}
		ujwt, err := uc.Encode(acc)
		if err != nil {
			t.Fatal(err)
		}
		file, err := jwt.FormatUserConfig(ujwt, seeds[u.Name])
		if err != nil {
			t.Fatal(err)
		}
		d.creds[u.Name] = d.write(u.Name+".creds", file)
	}
	opFile := d.write("operator.jwt", []byte(opJWT))
	return fmt.Sprintf("operator: %q\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n  %s: %q\n  %s: %q\n}\n",
		opFile, sysPub, sysPub, sysJWT, accPub, accJWT)
}

func (d *Deployment) write(name string, data []byte) string {
	p := filepath.Join(d.dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		d.t.Fatal(err)
	}
	return p
}

// start starts node i from its configuration file.
func (d *Deployment) start(i int) {
	d.t.Helper()
	opts, err := server.ProcessConfigFile(d.confs[i])
	if err != nil {
		d.t.Fatalf("externaltest: %s: %v", d.confs[i], err)
	}
	opts.NoSigs, opts.NoLog = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		d.t.Fatalf("externaltest: node %d: %v", i, err)
	}
	s.Start()
	if !s.ReadyForConnections(2 * time.Minute) { // a bound for a loaded machine, not a speed check
		d.t.Fatalf("externaltest: node %d not ready for connections", i)
	}
	d.servers[i] = s
}

// waitCurrent waits until every server's JetStream knows its meta leader.
func (d *Deployment) waitCurrent() {
	d.t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		current := true
		for _, s := range d.servers {
			current = current && s.JetStreamIsCurrent()
		}
		if current {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatal("externaltest: JetStream has no meta leader after a minute")
		}
	}
}

// URL is every server's client URL, comma-separated.
func (d *Deployment) URL() string { return strings.Join(d.urls, ",") }

// Creds is the credentials file of the user named name: its .creds file
// (JWT) or its nkey seed file.
func (d *Deployment) Creds(name string) string {
	p, ok := d.creds[name]
	if !ok {
		d.t.Fatalf("externaltest: no user %s", name)
	}
	return p
}

// Conf is node i's configuration file.
func (d *Deployment) Conf(i int) string { return d.confs[i] }

// Server is node i.
func (d *Deployment) Server(i int) *server.Server { return d.servers[i] }

// Stop stops every server.
func (d *Deployment) Stop() {
	for _, s := range d.servers {
		if s != nil {
			s.Shutdown()
			s.WaitForShutdown()
		}
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
