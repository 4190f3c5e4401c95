package kvstate_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

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
		b, err := kvstate.Open(context.Background(), meshtest.Conn(t, srv), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	})
}
