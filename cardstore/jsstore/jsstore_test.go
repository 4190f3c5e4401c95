package jsstore_test

import (
	"fmt"
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

// startServer starts a real single-node nats-server with JetStream (fsync
// before every acknowledgement, as embednats does) on a random port, with
// max_batch_size raised to jsstore.MaxBatchMessages so that every Put fits
// one atomic batch. It is shut down when the test ends.
func startServer(t testing.TB, storeDir string) *server.Server {
	t.Helper()
	if storeDir == "" {
		storeDir = filepath.Join(t.TempDir(), "jetstream")
	}
	opts := &server.Options{
		ServerName: "jsstore-test", Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: storeDir, SyncAlways: true, MaxPayload: embednats.DefaultMaxPayload,
	}
	opts.JetStreamLimits.MaxBatchSize = jsstore.MaxBatchMessages
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("configure nats-server: %v", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		t.Fatal("nats-server not ready within 10s")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

// connect opens a client connection to ns, closed when the test ends.
func connect(t testing.TB, ns *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), nats.Name(t.Name()))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// streams numbers the streams of the tests, so that stores on one server
// never share one by accident.
var streams atomic.Int64

// newStream returns a stream name no other store of this test binary uses.
func newStream() string { return fmt.Sprintf("cards_%d", streams.Add(1)) }

// open opens a store on a new stream of ns.
func open(t testing.TB, nc *nats.Conn, cfg jsstore.Config) *jsstore.Store {
	t.Helper()
	if cfg.Stream == "" {
		cfg.Stream = newStream()
	}
	s, err := jsstore.Open(t.Context(), nc, cfg)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	ns := startServer(t, "")
	nc := connect(t, ns)
	for _, mode := range []struct {
		name        string
		leaderReads bool
	}{
		{"direct-reads", false},
		{"leader-reads", true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) cardstore.Store {
				s := open(t, nc, jsstore.Config{})
				jsstore.SetLeaderReads(s, mode.leaderReads)
				return s
			})
		})
	}
}
