package meshtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/pkg/embednats"
)

// ClusterName is the cluster name of StartCluster's nodes; node i is
// named NodeName(i).
const ClusterName = "meshtest"

// ClusterWait bounds every wait of a Cluster (formation, a leader, a
// restarted node catching up); what it waits for is an event, polled.
var ClusterWait = 60 * time.Second

// NodeName is the server name of node i of a test cluster ("n0", "n1", …).
func NodeName(i int) string { return "n" + strconv.Itoa(i) }

// Cluster is a NATS cluster of real nats-servers for one test: every
// node runs JetStream with its own store under t.TempDir() and listens on
// loopback ports chosen at start, which it keeps across Restart.
type Cluster struct {
	t     testing.TB
	nodes []*node
	proc  bool // nodes are processes (StartProcessCluster)
	// base holds every node's directory. It is made before the cleanup
	// that stops the nodes is registered, so (cleanups run last-in first-
	// out) it is removed only after every node has stopped writing to it.
	base string
}

// node is one member: its fixed configuration and what runs it now.
type node struct {
	spec nodeSpec

	mu   sync.Mutex
	srv  *embednats.Server // in-process, while running
	proc *process          // process-based, while running
}

// nodeSpec is everything a node needs to (re)start, in-process or as a
// process (it travels to the child as JSON).
type nodeSpec struct {
	Name       string   `json:"name"`
	Dir        string   `json:"dir"`
	ClientPort int      `json:"client_port"`
	RoutePort  int      `json:"route_port"`
	Routes     []string `json:"routes"`
}

func (s nodeSpec) config() embednats.Config {
	return embednats.Config{
		DataDir:    s.Dir,
		Port:       s.ClientPort,
		JetStream:  true,
		ServerName: s.Name,
		Cluster: &embednats.Cluster{
			Name:   ClusterName,
			Listen: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.RoutePort)),
			Routes: s.Routes,
		},
		ReadyTimeout: ClusterWait,
	}
}

func (s nodeSpec) url() string {
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.ClientPort))
}

// StartCluster starts n (3 to 5) in-process nats-servers with routes to
// each other and JetStream on each, and returns once the cluster has
// formed: every node is routed, a JetStream meta leader exists, and an
// R<n> stream can be placed (which needs every node as a JetStream peer).
// The nodes stop when the test ends.
//
// Kill stops an in-process node with the server's own Shutdown, which is
// not a crash: its RAFT leaders step down and hand over first and its
// peers are told it left. For a real SIGKILL use StartProcessCluster.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return startCluster(t, n, false)
}

func startCluster(t testing.TB, n int, proc bool) *Cluster {
	t.Helper()
	if n < embednats.MinClusterSize || n > 5 {
		t.Fatalf("meshtest: a test cluster has 3 to 5 nodes, not %d (JetStream needs 3 for a quorum; an R5 stream bounds the formation check)", n)
	}
	c := &Cluster{t: t, proc: proc, base: t.TempDir()}
	t.Cleanup(c.stopAll)
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = c.startNodes(n); !errors.Is(err, embednats.ErrAddrInUse) {
			break
		}
		// A port picked free was taken before the node bound it: pick
		// new ones (only at first start; Restart keeps its ports).
		c.stopAll()
	}
	if err != nil {
		t.Fatalf("meshtest: start cluster: %v", err)
	}
	if err := c.waitFormed(n); err != nil {
		t.Fatalf("meshtest: %v", err)
	}
	return c
}

// startNodes picks 2n free loopback ports and starts every node.
func (c *Cluster) startNodes(n int) error {
	ports, err := freePorts(2 * n)
	if err != nil {
		return err
	}
	routes := make([]string, n)
	for i := range routes {
		routes[i] = "nats-route://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[n+i]))
	}
	c.nodes = make([]*node, n)
	for i := range c.nodes {
		c.nodes[i] = &node{spec: nodeSpec{
			Name: NodeName(i), Dir: c.nodeDir(NodeName(i)), ClientPort: ports[i], RoutePort: ports[n+i], Routes: routes,
		}}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.start(i) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// nodeDir makes a new directory for a node's store under c.base. A
// node's own t.TempDir would be removed before the cluster's cleanup
// stops the node (TempDir registers its removal when first called, after
// that cleanup), racing the server's last writes: "directory not empty".
func (c *Cluster) nodeDir(name string) string {
	dir, err := os.MkdirTemp(c.base, name+"-")
	if err != nil {
		c.t.Fatalf("meshtest: node directory: %v", err)
	}
	return dir
}

// FreePorts returns n distinct loopback ports, as strings, that were free
// a moment ago: every listener stays open until all are taken, so no two
// are the same port. It fails tb when it cannot listen.
func FreePorts(tb testing.TB, n int) []string {
	tb.Helper()
	ports, err := freePorts(n)
	if err != nil {
		tb.Fatalf("meshtest: free ports: %v", err)
	}
	out := make([]string, n)
	for i, p := range ports {
		out[i] = strconv.Itoa(p)
	}
	return out
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var out []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// start starts node i from its spec.
func (c *Cluster) start(i int) error {
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.srv != nil || nd.proc != nil {
		return fmt.Errorf("node %s is running", nd.spec.Name)
	}
	if c.proc {
		p, err := startProcess(nd.spec)
		if err != nil {
			return fmt.Errorf("node %s: %w", nd.spec.Name, err)
		}
		nd.proc = p
		return nil
	}
	srv, err := embednats.Start(nd.spec.config())
	if err != nil {
		return fmt.Errorf("node %s: %w", nd.spec.Name, err)
	}
	nd.srv = srv
	return nil
}

// stop stops node i (a no-op when it is not running).
func (c *Cluster) stop(i int) {
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	switch {
	case nd.proc != nil:
		nd.proc.kill()
		nd.proc = nil
	case nd.srv != nil:
		ctx, cancel := context.WithTimeout(context.Background(), ClusterWait)
		defer cancel()
		_ = nd.srv.Shutdown(ctx)
		nd.srv = nil
	}
}

func (c *Cluster) stopAll() {
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); c.stop(i) }()
	}
	wg.Wait()
}

// Len is the number of nodes, running or not.
func (c *Cluster) Len() int { return len(c.nodes) }

// Kill stops node i and keeps its store: a process node gets SIGKILL; an
// in-process node shuts down (see StartCluster for the difference).
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	c.checkIndex(i)
	c.stop(i)
}

// Restart starts node i again with the same name, store directory and
// ports, and waits until it is back in the cluster: connected to it, a
// client reaches the JetStream meta leader. Wait for its streams with
// WaitStreamCurrent.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.checkIndex(i)
	if err := c.start(i); err != nil {
		c.t.Fatalf("meshtest: restart: %v", err)
	}
	if err := c.waitJetStream(i); err != nil {
		c.t.Fatalf("meshtest: restart: %v", err)
	}
}

func (c *Cluster) checkIndex(i int) {
	c.t.Helper()
	if i < 0 || i >= len(c.nodes) {
		c.t.Fatalf("meshtest: node %d: the cluster has nodes 0 to %d", i, len(c.nodes)-1)
	}
}

// URLs are the client URLs of every node, running or not, in node order.
func (c *Cluster) URLs() []string {
	out := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		out[i] = nd.spec.url()
	}
	return out
}

// URL is URLs joined with commas, as nats.Connect takes them.
func (c *Cluster) URL() string { return strings.Join(c.URLs(), ",") }

// Server is node i's in-process server, nil while it is killed. It fails
// the test for a process cluster.
func (c *Cluster) Server(i int) *embednats.Server {
	c.t.Helper()
	c.checkIndex(i)
	if c.proc {
		c.t.Fatalf("meshtest: Server(%d): the nodes of a process cluster run in other processes; use URLs", i)
	}
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.srv
}

// Running reports whether node i is running (not killed).
func (c *Cluster) Running(i int) bool {
	c.checkIndex(i)
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.srv != nil || nd.proc != nil
}

// Connect opens a client connection that knows every node's URL and
// reconnects for ever (it fails over to a running node); closed when the
// test ends.
func (c *Cluster) Connect(opts ...nats.Option) *nats.Conn {
	c.t.Helper()
	opts = append([]nats.Option{nats.Name(c.t.Name()), nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(c.URL(), opts...)
	if err != nil {
		c.t.Fatalf("meshtest: connect to the cluster: %v", err)
	}
	c.t.Cleanup(nc.Close)
	return nc
}

// Index is the node index of a server name ("n1" → 1), -1 when it names
// no node of the cluster.
func (c *Cluster) Index(serverName string) int {
	for i, nd := range c.nodes {
		if nd.spec.Name == serverName {
			return i
		}
	}
	return -1
}

// StreamLeader waits until the stream (a KV bucket B is stream KV_B) has
// a leader and returns its node index.
func (c *Cluster) StreamLeader(stream string) int {
	c.t.Helper()
	leader := -1
	err := c.pollStream(stream, func(si *jetstream.StreamInfo) error {
		if si.Cluster == nil || c.Index(si.Cluster.Leader) < 0 || !c.Running(c.Index(si.Cluster.Leader)) {
			return errors.New("no leader on a running node")
		}
		leader = c.Index(si.Cluster.Leader)
		return nil
	})
	if err != nil {
		c.t.Fatalf("meshtest: leader of stream %s: %v", stream, err)
	}
	return leader
}

// WaitStreamCurrent waits until the stream has a leader and every one of
// its replicas is online and current (after a Restart: caught up).
func (c *Cluster) WaitStreamCurrent(stream string) {
	c.t.Helper()
	err := c.pollStream(stream, func(si *jetstream.StreamInfo) error {
		if si.Cluster == nil || si.Cluster.Leader == "" {
			return errors.New("no leader")
		}
		if len(si.Cluster.Replicas)+1 != si.Config.Replicas {
			return fmt.Errorf("%d replicas besides leader %s, want %d", len(si.Cluster.Replicas), si.Cluster.Leader, si.Config.Replicas-1)
		}
		for _, p := range si.Cluster.Replicas {
			if p.Offline || !p.Current {
				return fmt.Errorf("replica %s: offline %v, current %v, lag %d", p.Name, p.Offline, p.Current, p.Lag)
			}
		}
		return nil
	})
	if err != nil {
		c.t.Fatalf("meshtest: stream %s current on every replica: %v", stream, err)
	}
}

// pollStream asks for the stream's info through any running node until
// ok accepts it or ClusterWait passes; the error names the last reason.
func (c *Cluster) pollStream(stream string, ok func(*jetstream.StreamInfo) error) error {
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return poll(func(ctx context.Context) error {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		return ok(s.CachedInfo())
	})
}

// poll runs try every 50ms until it returns nil or ClusterWait passes.
func poll(try func(ctx context.Context) error) error {
	deadline := time.Now().Add(ClusterWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := try(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %w", ClusterWait, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitJetStream waits until a client connected to node i alone reaches
// the JetStream meta leader (account info answers).
func (c *Cluster) waitJetStream(i int) error {
	nc, err := nats.Connect(c.nodes[i].spec.url(), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	err = poll(func(ctx context.Context) error { _, err := js.AccountInfo(ctx); return err })
	if err != nil {
		return fmt.Errorf("node %s: JetStream meta leader: %w", c.nodes[i].spec.Name, err)
	}
	return nil
}

// probeStream is the stream waitFormed places to prove every node is a
// JetStream peer; it is deleted again.
const probeStream = "meshtest_cluster_probe"

// waitFormed waits until every node reaches a meta leader and an R<n>
// stream can be placed.
func (c *Cluster) waitFormed(n int) error {
	for i := range c.nodes {
		if err := c.waitJetStream(i); err != nil {
			return fmt.Errorf("cluster formation: %w", err)
		}
	}
	nc, err := nats.Connect(c.URL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	err = poll(func(ctx context.Context) error {
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: probeStream, Subjects: []string{"meshtest.probe"}, Storage: jetstream.MemoryStorage, Replicas: n,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("cluster formation: an R%d stream cannot be placed (not every node is a JetStream peer): %w", n, err)
	}
	return poll(func(ctx context.Context) error { return js.DeleteStream(ctx, probeStream) })
}

// MoveStreamLeader makes node i the stream's leader (a leader stepdown
// with node i preferred) and waits until it is. Node i must hold a
// current replica.
func (c *Cluster) MoveStreamLeader(stream string, i int) {
	c.t.Helper()
	c.checkIndex(i)
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		c.t.Fatalf("meshtest: move leader of %s: %v", stream, err)
	}
	defer nc.Close()
	req := fmt.Sprintf(`{"placement":{"preferred":%q}}`, NodeName(i))
	err = poll(func(ctx context.Context) error {
		if l := c.StreamLeader(stream); l == i {
			return nil
		}
		msg, err := deadline.Request(ctx, nc, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, []byte(req))
		if err != nil {
			return err
		}
		var resp struct {
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			return err
		}
		if resp.Error != nil {
			return errors.New(resp.Error.Description)
		}
		return errors.New("stepped down; waiting for the new leader")
	})
	if err != nil {
		c.t.Fatalf("meshtest: move leader of %s to %s: %v", stream, NodeName(i), err)
	}
}

// AddNode starts one more node that routes to every node of the cluster
// (the running nodes keep their route lists: the cluster tells them of
// the newcomer), waits until it reaches the JetStream meta leader, and
// returns its index once an R<running nodes> stream can be placed (the
// newcomer is a JetStream peer); at most 5 nodes may run. New streams may
// be placed on it; existing streams stay where they are.
func (c *Cluster) AddNode() int {
	c.t.Helper()
	running := 0
	for j := range c.nodes {
		if c.Running(j) {
			running++
		}
	}
	if running >= 5 {
		c.t.Fatalf("meshtest: add node: %d nodes run already; the formation check places an R<running> stream, at most R5", running)
	}
	ports, err := freePorts(2)
	if err != nil {
		c.t.Fatalf("meshtest: add node: %v", err)
	}
	i := len(c.nodes)
	routes := append(slices.Clone(c.nodes[i-1].spec.Routes), "nats-route://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])))
	c.nodes = append(c.nodes, &node{spec: nodeSpec{
		Name: NodeName(i), Dir: c.nodeDir(NodeName(i)), ClientPort: ports[0], RoutePort: ports[1], Routes: routes,
	}})
	if err := c.start(i); err != nil {
		c.t.Fatalf("meshtest: add node: %v", err)
	}
	if err := c.waitJetStream(i); err != nil {
		c.t.Fatalf("meshtest: add node: %v", err)
	}
	if err := c.waitFormed(running + 1); err != nil {
		c.t.Fatalf("meshtest: add node %s: %v", NodeName(i), err)
	}
	return i
}
