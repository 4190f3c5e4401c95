package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// stuckResultStore is the worker's CardStore whose tool.result writes never
// return (ignoring their context, as a store stuck on a dead disk or a
// request without a deadline would) until release is closed.
type stuckResultStore struct {
	// The interface, not *boltstore.Store, whose PutWithEntry would
	// bypass the Put below.
	cardstore.Store
	entered chan struct{} // one value when a result write is stuck
	release chan struct{}
}

func (s *stuckResultStore) Put(ctx context.Context, cards ...*card.Card) error {
	for _, c := range cards {
		if c.Type == card.TypeToolResult {
			s.entered <- struct{}{}
			<-s.release
		}
	}
	return s.Store.Put(ctx, cards...)
}

// TestStopAbandonsStuckCalls: once the drain deadline has canceled the
// calls in flight, Stop waits CancelGrace for them and then returns,
// whatever is stuck — a handler that ignores its cancellation, a result
// write that never returns. The stuck call's command stays unacknowledged,
// for redelivery. Stop used to wait for such a call forever, and `up`
// ignored SIGTERM while a call hung on a store read.
func TestStopAbandonsStuckCalls(t *testing.T) {
	tests := []struct {
		name       string
		stuckStore bool
	}{
		{"handler ignores its cancellation", false},
		{"result write never returns", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			entered := make(chan struct{}, 1)
			tool := worker.Tool{Name: "stuck", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
				if !tc.stuckStore {
					entered <- struct{}{}
					<-release // ignores ctx
				}
				return worker.OK(map[string]bool{"ok": true}), nil
			}}
			var wrap func(*boltstore.Store) cardstore.Store
			if tc.stuckStore {
				wrap = func(b *boltstore.Store) cardstore.Store {
					return &stuckResultStore{Store: b, entered: entered, release: release}
				}
			}
			h := newHarnessWrapped(t, worker.Config{CancelGrace: 100 * time.Millisecond}, nil, wrap, tool)
			// Registered after the harness's own cleanup, so it runs
			// first: the stuck goroutine ends before the store closes.
			t.Cleanup(func() { close(release) })
			c := h.writeCall("stuck", `{}`)
			h.publish(toolSubject("stuck"), c.command("stuck"), nil)
			<-entered

			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			err := h.rt.Stop(ctx)
			if !errors.Is(err, worker.ErrDrainTimeout) || !strings.Contains(err.Error(), "1 still busy") {
				t.Fatalf("Stop with a stuck call = %v, want ErrDrainTimeout naming 1 abandoned call", err)
			}
			// The stuck call's command is still the consumer's, not
			// acknowledged: JetStream redelivers it after the ack wait.
			cons, err := h.js.Consumer(context.Background(), streams.CommandStream(ver), streams.ToolConsumer("stuck"))
			if err != nil {
				t.Fatal(err)
			}
			info, err := cons.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if info.NumAckPending != 1 {
				t.Fatalf("ack pending = %d, want 1 (the abandoned command)", info.NumAckPending)
			}
		})
	}
}
