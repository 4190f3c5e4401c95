// Package jskvtest starts a real 3-node JetStream cluster inside the test
// process (three nats-servers with routes on loopback, random ports, files
// in t.TempDir, fsync before ack), so the KV backends can be tested with
// replicated (R3) buckets and with clients on different nodes.
package jskvtest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is a running 3-node cluster.
type Cluster struct {
	// Servers are the nodes.
	Servers []*server.Server
	opts    []*server.Options
	t       testing.TB
}

// Start starts the cluster and waits until its JetStream meta group has a
// leader (a bucket can be created); everything stops when the test ends.
func Start(t testing.TB) *Cluster {
	t.Helper()
	return StartWith(t, nil)
}

// StartWith is Start with each node's options passed through tweak (when
// not nil) before the node starts: a larger max payload, say.
func StartWith(t testing.TB, tweak func(*server.Options)) *Cluster {
	t.Helper()
	var c *Cluster
	for attempt := 1; ; attempt++ {
		var err error
		if c, err = tryStart(t, tweak); err == nil {
			break
		}
		if attempt == startTries {
			t.Fatalf("jskvtest: %v (%d tries on new ports)", err, startTries)
		}
		t.Logf("jskvtest: %v; starting the cluster again on new ports", err)
	}
	t.Cleanup(func() {
		for _, s := range c.Servers {
			s.Shutdown()
			s.WaitForShutdown()
		}
	})
	// Wait for the meta leader: until then stream creation fails.
	js := c.JetStream(t, 0)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil && c.hasMetaLeader() {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster: no JetStream meta leader after 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling the cluster's state, not timing the code under test
	}
}

// Starting the nodes. Their route ports are picked ahead (listen on :0,
// close, hand the number to the node) because each node's route list
// names all three; another test's listener or outgoing connection can
// take a port in between, and a node that cannot bind its route port
// never gets ready (nats-server keeps the error to itself). A fresh node
// is ready in well under firstStartPatience, so one that is not is
// taken for such a collision: the nodes are shut down and the cluster
// starts again on new ports, up to startTries times.
const (
	firstStartPatience = 20 * time.Second
	startTries         = 3
)

// tryStart starts three fresh nodes on newly picked route ports; on a
// node that does not get ready it shuts down the ones it started.
func tryStart(t testing.TB, tweak func(*server.Options)) (*Cluster, error) {
	const n = 3
	ports := make([]int, n)
	var routes []string
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i]))
	}
	c := &Cluster{t: t}
	for i := range n {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), SyncAlways: true, NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "jskvtest", Host: "127.0.0.1", Port: ports[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		}
		if tweak != nil {
			tweak(opts)
		}
		c.opts = append(c.opts, opts)
		c.Servers = append(c.Servers, nil)
		if err := c.startWithin(i, firstStartPatience); err != nil {
			for _, s := range c.Servers {
				if s != nil {
					s.Shutdown()
					s.WaitForShutdown()
				}
			}
			return nil, fmt.Errorf("%w (route port %d)", err, ports[i])
		}
	}
	return c, nil
}

// startPatience bounds how long a node may take to accept connections.
const startPatience = 2 * time.Minute

// start starts node i from its options, failing the test when it does
// not get ready within startPatience.
func (c *Cluster) start(i int) {
	c.t.Helper()
	if err := c.startWithin(i, startPatience); err != nil {
		c.t.Fatal(err)
	}
}

// startWithin starts node i from its options and waits up to patience
// for it to accept connections; a node that does not is shut down.
func (c *Cluster) startWithin(i int, patience time.Duration) error {
	s, err := server.NewServer(c.opts[i].Clone())
	if err != nil {
		return err
	}
	go s.Start()
	// A node recovers its JetStream store before it takes connections; on
	// a loaded 2-core machine a restarted node once needed more than 10 s.
	// The bound only ends a test whose node never comes up.
	if !s.ReadyForConnections(patience) {
		s.Shutdown()
		s.WaitForShutdown()
		return fmt.Errorf("node %d not ready for connections after %v", i+1, patience)
	}
	c.Servers[i] = s
	return nil
}

// Stop shuts node i down (it keeps its store).
func (c *Cluster) Stop(i int) {
	c.Servers[i].Shutdown()
	c.Servers[i].WaitForShutdown()
}

// Restart starts a stopped node i again with the same name, store and
// route port (its client port is new).
func (c *Cluster) Restart(t testing.TB, i int) {
	t.Helper()
	c.start(i)
}

func (c *Cluster) hasMetaLeader() bool {
	for _, s := range c.Servers {
		if s.JetStreamIsLeader() {
			return true
		}
	}
	return false
}

// Conn connects to node i; closed when the test ends.
func (c *Cluster) Conn(t testing.TB, i int) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(c.Servers[i].ClientURL(), nats.Name(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream context on a new connection to node i.
func (c *Cluster) JetStream(t testing.TB, i int) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(c.Conn(t, i))
	if err != nil {
		t.Fatal(err)
	}
	return js
}
