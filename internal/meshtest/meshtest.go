// Package meshtest starts real infrastructure for tests: an in-process
// nats-server on a random port, with JetStream and fsync on, in t.TempDir().
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
