package kvstate_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/services/atlas/internal/state"
	"github.com/utpmesh/utpmesh/services/atlas/internal/state/kvstate"
	"github.com/utpmesh/utpmesh/services/atlas/internal/state/statetest"
)

func TestConformance(t *testing.T) {
	srv := meshtest.NATS(t)
	var n atomic.Int64
	statetest.Run(t, func(t *testing.T) (state.Store, state.Store) {
		// Two connections, as two worker processes have.
		cfg := kvstate.Config{Bucket: fmt.Sprintf("atlas_test%d", n.Add(1))}
		a, err := kvstate.Open(context.Background(), meshtest.Conn(t, srv), cfg)
		if err != nil {
			t.Fatal(err)
		}
		nc := meshtest.Conn(t, srv)
		b, err := kvstate.Open(context.Background(), nc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkStream(t, nc, cfg.Bucket, 1)
		return a, b
	})
}

// Bad configurations are refused with what to use instead.
func TestOpenRefusesBadConfig(t *testing.T) {
	nc := meshtest.Conn(t, meshtest.NATS(t))
	for _, tc := range []struct {
		cfg  kvstate.Config
		want string
	}{
		{kvstate.Config{}, "Bucket is required"},
		{kvstate.Config{Bucket: "atlas_x", Replicas: 7}, "use 1, or 3"},
		{kvstate.Config{Bucket: "atlas_x", Replicas: 3}, "R3"}, // one server cannot hold three replicas
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := kvstate.Open(ctx, nc, tc.cfg)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%+v) = %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}
