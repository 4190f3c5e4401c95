// Package meshtest starts real infrastructure for tests: an in-process
// nats-server on a random port, with JetStream and fsync on, in t.TempDir()
// (NATS), and a NATS cluster of 3 to 5 such servers routed on loopback
// (StartCluster, in-process; StartProcessCluster, one child process per
// node so that Kill is a real SIGKILL).
//
// In-process or processes: Kill of an in-process node is nats-server's
// Shutdown, which is a goodbye, not a crash: the node's RAFT leaders step
// down and hand over first, peers are told it left, and its stores are
// flushed and closed. A test of what happens when a node dies (leader
// election after silence, crash recovery of the store on restart) needs
// StartProcessCluster; measured on this package's tests, writes to an R3
// stream resumed at once after an in-process stop of its leader and only
// after the election timeout (seconds) after a SIGKILL. Use StartCluster
// when the node's loss is not what is tested: it is cheaper and needs no
// TestMain hook.
package meshtest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/embednats"
)

// NATS starts an embedded server with JetStream for the test and returns it;
// it is shut down when the test ends.
func NATS(t testing.TB) *embednats.Server {
	t.Helper()
	srv, err := embednats.Start(embednats.Config{DataDir: t.TempDir(), Port: -1, JetStream: true})
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return srv
}

// Conn opens a client connection to srv, closed when the test ends.
func Conn(t testing.TB, srv *embednats.Server) *nats.Conn {
	t.Helper()
	nc, err := srv.Connect(nats.Name(t.Name()))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JSONGet walks a decoded JSON value by object keys and array indexes
// ("a", 0, "b"); a missing key or an index out of range gives nil.
func JSONGet(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			s, _ := v.([]any)
			if k < 0 || k >= len(s) {
				return nil
			}
			v = s[k]
		}
	}
	return v
}

// JSONStr is JSONGet as a string ("" when the value is not one).
func JSONStr(v any, path ...any) string { s, _ := JSONGet(v, path...).(string); return s }
