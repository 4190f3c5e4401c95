package jsstore_test

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/jsstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/embednats"
)

// startCluster starts n real nats-servers with JetStream in this process,
// clustered over routes on loopback (the first is every other's seed), and
// returns them once JetStream has a meta leader. They are shut down when
// the test ends.
func startCluster(t testing.TB, n int) []*server.Server {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	servers := make([]*server.Server, n)
	for i := range n {
		opts := &server.Options{
			ServerName: fmt.Sprintf("node-%d", i), Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
			JetStream: true, StoreDir: filepath.Join(t.TempDir(), "jetstream"), SyncAlways: true,
			MaxPayload: embednats.DefaultMaxPayload,
			Cluster:    server.ClusterOpts{Name: "jsstore-test", Host: "127.0.0.1", Port: ports[i]},
		}
		opts.JetStreamLimits.MaxBatchSize = jsstore.MaxBatchMessages
		for j, port := range ports {
			if j != i {
				opts.Routes = append(opts.Routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", port)})
			}
		}
		ns, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("configure node %d: %v", i, err)
		}
		go ns.Start()
		t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
		servers[i] = ns
	}
	for i, ns := range servers {
		if !ns.ReadyForConnections(30 * time.Second) {
			t.Fatalf("node %d not ready within 30s", i)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready := 0
		for _, ns := range servers {
			if ns.JetStreamIsClustered() && ns.JetStreamIsCurrent() {
				ready++
			}
		}
		if ready == n {
			return servers
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream cluster of %d not ready within 30s (%d current)", n, ready)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openR3 opens a store with three replicas through a connection to
// servers[i], waiting out the first moments of a new cluster, when the
// meta leader may not answer yet.
func openR3(t testing.TB, servers []*server.Server, i int, stream string) *jsstore.Store {
	t.Helper()
	nc, err := nats.Connect(servers[i].ClientURL(), nats.Name(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := jsstore.Open(t.Context(), nc, jsstore.Config{Stream: stream, Replicas: 3})
		if err == nil {
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
		if time.Now().After(deadline) || !(errors.Is(err, jsstore.ErrUnsupported) || errors.Is(err, jsstore.ErrUnavailable) || isTransient(err)) {
			t.Fatalf("open an R3 store: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// isTransient reports the errors of a cluster that is still electing.
func isTransient(err error) bool {
	var timeout interface{ Timeout() bool }
	return errors.As(err, &timeout) || errors.Is(err, nats.ErrTimeout)
}

// TestConformanceR3 runs the conformance suite against stores with three
// replicas on a 3-node cluster, each store's connection on another node,
// so that reads are answered by followers as well as the leader.
func TestConformanceR3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	servers := startCluster(t, 3)
	var next atomic.Int64
	storetest.Run(t, func(t *testing.T) cardstore.Store {
		return openR3(t, servers, int(next.Add(1)%3), newStream())
	})
}
