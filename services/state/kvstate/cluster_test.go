package kvstate_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
	"github.com/utpmesh/utpmesh/services/state/statetest"
)

// cluster starts three routed nats-servers with JetStream on loopback,
// each fsyncing before it acknowledges (SyncAlways, as the mesh's embedded
// server does), and returns their client URLs. A clustered JetStream server needs its routes
// configured at start, so the route ports are picked first (free ports the
// kernel handed out and that were closed again).
func cluster(t testing.TB) []string {
	t.Helper()
	var routes []*url.URL
	var ports []int
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: l.Addr().String()})
		_ = l.Close()
	}
	var servers []*server.Server
	for i := range 3 {
		o := &server.Options{ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: -1, JetStream: true,
			StoreDir: t.TempDir(), NoLog: true, NoSigs: true, Routes: routes, SyncAlways: true,
			Cluster: server.ClusterOpts{Name: "atlas-test", Host: "127.0.0.1", Port: ports[i]}}
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		servers = append(servers, s)
	}
	var urls []string
	for i, s := range servers {
		if !s.ReadyForConnections(20 * time.Second) {
			t.Fatalf("server %d did not start", i)
		}
		urls = append(urls, s.ClientURL())
	}
	return urls
}

// The suite on a three-node cluster, R3, each handle connected to another
// node: reads go to the stream leader, commits are atomic batches.
func TestConformanceR3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	urls := cluster(t)
	connect := func(t *testing.T, u string) *nats.Conn {
		nc, err := nats.Connect(u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	var n atomic.Int64
	open := func(t *testing.T, nc *nats.Conn, cfg kvstate.Config) *kvstate.Store {
		t.Helper()
		// The cluster's JetStream meta group forms after the servers are
		// up: retry until it can place an R3 stream.
		deadline := time.Now().Add(30 * time.Second)
		for {
			// Each try gets its own timeout: a JetStream API request
			// before the meta group has a leader is never answered.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			s, err := kvstate.Open(ctx, nc, cfg)
			cancel()
			if err == nil {
				checkStream(t, nc, cfg.Bucket, 3)
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("open R3 bucket: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	statetest.Run(t, func(t *testing.T) (state.Store, state.Store) {
		cfg := kvstate.Config{Bucket: fmt.Sprintf("atlas_r3_%d", n.Add(1)), Replicas: 3}
		a := open(t, connect(t, urls[0]), cfg)
		b := open(t, connect(t, urls[2]), cfg)
		return a, b
	})
}

// checkStream asserts the bucket's stream has the replicas asked for,
// takes atomic batches and serves reads from its leader only.
func checkStream(t *testing.T, nc *nats.Conn, bucket string, replicas int) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	c := st.CachedInfo().Config
	if c.Replicas != replicas || !c.AllowAtomicPublish || c.AllowDirect {
		t.Fatalf("stream of %s: replicas %d, atomic %v, direct %v; want %d, true, false", bucket, c.Replicas, c.AllowAtomicPublish, c.AllowDirect, replicas)
	}
}
