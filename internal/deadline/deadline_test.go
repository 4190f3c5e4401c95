package deadline_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/internal/meshtest"
)

// TestBound: a context with a deadline keeps it; one without gets the
// given bound, or Default.
func TestBound(t *testing.T) {
	far := time.Now().Add(time.Hour)
	withDL, cancel := context.WithDeadline(context.Background(), far)
	defer cancel()
	tests := []struct {
		name string
		ctx  context.Context
		d    time.Duration
		max  time.Duration // the deadline is at most this far away
		keep bool          // the deadline is ctx's own
	}{
		{"own deadline kept", withDL, time.Second, 0, true},
		{"bound applied", context.Background(), time.Second, time.Second, false},
		{"default applied", context.Background(), 0, deadline.Default, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now()
			ctx, cancel := deadline.Bound(tc.ctx, tc.d)
			defer cancel()
			dl, ok := ctx.Deadline()
			switch {
			case !ok:
				t.Fatal("no deadline")
			case tc.keep && !dl.Equal(far):
				t.Fatalf("deadline %v, want the context's own %v", dl, far)
			case !tc.keep && dl.After(before.Add(tc.max).Add(time.Second)):
				t.Fatalf("deadline %v is further than %v", dl, tc.max)
			}
		})
	}
}

// TestRequestReturnsWhenNobodyAnswers: a request that a subscriber takes
// and never answers ends with context.DeadlineExceeded instead of waiting
// forever, though the caller's context has no deadline.
func TestRequestReturnsWhenNobodyAnswers(t *testing.T) {
	nc := meshtest.Conn(t, meshtest.NATS(t))
	sub, err := nc.SubscribeSync("stalled")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// A short bound on the caller's side, as a store client configures
	// its own; the caller's context itself has none.
	ctx, cancel := deadline.Bound(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := deadline.Request(ctx, nc, "stalled", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Request = %v, want context.DeadlineExceeded", err)
	}
	m := nats.NewMsg("stalled")
	ctx2, cancel2 := deadline.Bound(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := deadline.RequestMsg(ctx2, nc, m); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RequestMsg = %v, want context.DeadlineExceeded", err)
	}
}

// TestPatiently: a timed-out attempt is tried again with a longer bound;
// another error only when again says so; ctx's end stops it.
func TestPatiently(t *testing.T) {
	var bounds []time.Duration
	n := 0
	err := deadline.Patiently(t.Context(), time.Minute, nil, func(ctx context.Context) error {
		n++
		dl, _ := ctx.Deadline()
		bounds = append(bounds, time.Until(dl).Round(time.Second))
		if n < 3 {
			return fmt.Errorf("create: %w", context.DeadlineExceeded)
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("Patiently = %v after %d attempts; want nil after 3", err, n)
	}
	if bounds[0] != deadline.FirstAttempt || bounds[1] != 2*deadline.FirstAttempt {
		t.Errorf("attempt bounds %v; want %v, then doubled", bounds, deadline.FirstAttempt)
	}
	boom := errors.New("boom")
	n = 0
	if err := deadline.Patiently(t.Context(), time.Minute, nil, func(context.Context) error { n++; return boom }); !errors.Is(err, boom) || n != 1 {
		t.Errorf("another error without again: %v after %d attempts; want boom after 1", err, n)
	}
	n = 0
	err = deadline.Patiently(t.Context(), time.Minute, func(error) bool { return true }, func(context.Context) error {
		n++
		if n == 1 {
			return boom
		}
		return nil
	})
	if err != nil || n != 2 {
		t.Errorf("another error with again: %v after %d attempts; want nil after 2", err, n)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := deadline.Patiently(ctx, time.Minute, nil, func(ctx context.Context) error { return ctx.Err() }); !errors.Is(err, context.Canceled) {
		t.Errorf("ended ctx: %v; want context.Canceled", err)
	}
}

// TestElecting: the errors of a JetStream request sent while its asset
// had no leader, and some that are not.
func TestElecting(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"10008", fmt.Errorf("put: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008}), true},
		{"no responders", nats.ErrNoResponders, true},
		{"no stream response", fmt.Errorf("create: %w", jetstream.ErrNoStreamResponse), true},
		{"wrong last sequence", &jetstream.APIError{Code: 400, ErrorCode: 10071}, false},
		{"key exists", jetstream.ErrKeyExists, false},
		{"timeout", context.DeadlineExceeded, false},
	} {
		if got := deadline.Electing(tc.err); got != tc.want {
			t.Errorf("%s: Electing = %v, want %v", tc.name, got, tc.want)
		}
	}
}
