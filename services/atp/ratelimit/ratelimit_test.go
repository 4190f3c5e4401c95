package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/services/atp/ratelimit"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// TestSharedAcrossProcesses: two limiters on two connections (as two
// worker processes) share the counters; together they allow exactly the
// limit, concurrently.
func TestSharedAcrossProcesses(t *testing.T) {
	srv := meshtest.NATS(t)
	c := &clock{t: time.Date(2027, 1, 10, 9, 0, 30, 0, time.UTC)}
	ctx := context.Background()
	var ls []*ratelimit.Limiter
	for i := 0; i < 2; i++ {
		js, err := jetstream.New(meshtest.Conn(t, srv))
		if err != nil {
			t.Fatal(err)
		}
		l, err := ratelimit.New(ctx, js, ratelimit.Config{Now: c.Now, Limits: func(p string) ratelimit.Limits {
			if p == "small" {
				return ratelimit.Limits{CallsPerMinute: 5, HEMPerHour: 2, NotificationsPerHour: -1}
			}
			return ratelimit.Limits{}
		}})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	var mu sync.Mutex
	allowed, limited := 0, 0
	var wg sync.WaitGroup
	for i := 0; i < 80; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			err := ls[i%2].Allow(ctx, "demo", "agent-1", ratelimit.KindCall)
			mu.Lock()
			defer mu.Unlock()
			var lim *ratelimit.Limited
			switch {
			case err == nil:
				allowed++
			case errors.As(err, &lim) && lim.Limit == "calls_per_minute" && lim.RetryAfterSeconds == 30:
				limited++
			default:
				t.Errorf("call %d: %v", i, err)
			}
		}(i)
	}
	wg.Wait()
	if allowed != 60 || limited != 20 {
		t.Fatalf("allowed %d, limited %d; want 60 and 20 (the public default)", allowed, limited)
	}
	if err := ls[0].Allow(ctx, "demo", "agent-2", ratelimit.KindCall); err != nil {
		t.Fatalf("another client is limited too: %v", err)
	}
	c.Add(30 * time.Second) // next minute window
	if err := ls[1].Allow(ctx, "demo", "agent-1", ratelimit.KindCall); err != nil {
		t.Fatalf("new window: %v", err)
	}

	t.Run("per project, per kind, refused calls not counted", func(t *testing.T) {
		for i := 0; i < 2; i++ {
			if err := ls[i].Allow(ctx, "small", "a", ratelimit.KindHEM); err != nil {
				t.Fatal(err)
			}
		}
		err := ls[0].Allow(ctx, "small", "a", ratelimit.KindHEM)
		var lim *ratelimit.Limited
		if !errors.As(err, &lim) || lim.Limit != "hem_per_hour" || lim.Max != 2 || !errors.Is(err, ratelimit.ErrLimited) {
			t.Fatalf("third HEM: %v", err)
		}
		// The refused HEM call did not use a per-minute slot: 3 more plain calls fit in 5.
		for i := 0; i < 3; i++ {
			if err := ls[1].Allow(ctx, "small", "a", ratelimit.KindCall); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		if err := ls[0].Allow(ctx, "small", "a", ratelimit.KindCall); !errors.Is(err, ratelimit.ErrLimited) {
			t.Fatalf("sixth call: %v", err)
		}
		c.Add(time.Minute)
		for i := 0; i < 4; i++ { // notifications are off in "small"
			if err := ls[0].Allow(ctx, "small", "a", ratelimit.KindNotification); err != nil {
				t.Fatalf("notification %d: %v", i, err)
			}
		}
	})
}
