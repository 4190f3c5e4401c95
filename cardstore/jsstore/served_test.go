package jsstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/jsstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// TestServedByTwoServers runs the conformance suite through the NATS
// client against two CardStore servers (natsstore) in one queue group,
// each on a jsstore.Store of its own connection on one stream: the
// requests of one client land on either server, and no server is special.
// Each subtest uses a protocol version of its own, so that the servers of
// parallel subtests never answer each other.
func TestServedByTwoServers(t *testing.T) {
	ns := startServer(t, "")
	storetest.Run(t, func(t *testing.T) cardstore.Store {
		stream := newStream()
		ver := "t" + stream
		for range 2 {
			st := open(t, connect(t, ns), jsstore.Config{Stream: stream})
			srv, err := natsstore.NewServer(connect(t, ns), st, natsstore.ServerConfig{Version: ver})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := srv.Stop(ctx); err != nil {
					t.Error(fmt.Errorf("stop CardStore server: %w", err))
				}
			})
		}
		c, err := natsstore.NewClient(connect(t, ns), svc.WithVersion(ver), svc.WithTimeout(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}
