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

// newLimiters opens n limiters on n connections (as n worker processes)
// over one bucket.
func newLimiters(t testing.TB, n int, now func() time.Time, limits func(string) ratelimit.Limits) []*ratelimit.Limiter {
	t.Helper()
	srv := meshtest.NATS(t)
	var ls []*ratelimit.Limiter
	for i := 0; i < n; i++ {
		js, err := jetstream.New(meshtest.Conn(t, srv))
		if err != nil {
			t.Fatal(err)
		}
		l, err := ratelimit.New(context.Background(), js, ratelimit.Config{Now: now, Limits: limits})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	return ls
}

// TestSlidingWindow: a limit holds in every interval of its window's
// length, wherever it starts. The case: 110 calls in 27 s across a
// minute boundary at 60/min; a fixed window let all 110 through.
func TestSlidingWindow(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		start     time.Time
		attempts  int
		span      time.Duration
		kind      string
		limits    ratelimit.Limits
		wantOK    int
		wantLimit string
		window    time.Duration
	}{
		{"110 in 27 s across a minute boundary", time.Date(2027, 1, 10, 9, 0, 45, 0, time.UTC), 110, 27 * time.Second, ratelimit.KindCall,
			ratelimit.Limits{}, 60, "calls_per_minute", time.Minute},
		{"HEM across an hour boundary", time.Date(2027, 1, 10, 9, 55, 0, 0, time.UTC), 30, 10 * time.Minute, ratelimit.KindHEM,
			ratelimit.Limits{}, 10, "hem_per_hour", time.Hour},
		{"notifications, a small limit", time.Date(2027, 1, 10, 9, 59, 59, 0, time.UTC), 12, 2 * time.Second, ratelimit.KindNotification,
			ratelimit.Limits{NotificationsPerHour: 3}, 3, "notifications_per_hour", time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{t: tc.start}
			l := newLimiters(t, 1, c.Now, func(string) ratelimit.Limits { return tc.limits })[0]
			step := tc.span / time.Duration(tc.attempts)
			ok := 0
			var last *ratelimit.Limited
			for i := 0; i < tc.attempts; i++ {
				if i > 0 {
					c.Add(step)
				}
				err := l.Allow(ctx, "demo", "agent-1", tc.kind)
				var lim *ratelimit.Limited
				switch {
				case err == nil:
					ok++
				case errors.As(err, &lim) && lim.Limit == tc.wantLimit:
					last = lim
				default:
					t.Fatalf("attempt %d: %v", i, err)
				}
			}
			if ok != tc.wantOK {
				t.Fatalf("%d of %d calls in %v allowed, want %d", ok, tc.attempts, tc.span, tc.wantOK)
			}
			// One more fits when the first call leaves the window.
			if want := tc.window - time.Duration(tc.attempts-1)*step; last == nil || last.RetryAfter != want {
				t.Fatalf("last refusal %+v, want retry after %v", last, want)
			}
			c.Add(last.RetryAfter - time.Nanosecond)
			if err := l.Allow(ctx, "demo", "agent-1", tc.kind); !errors.Is(err, ratelimit.ErrLimited) {
				t.Fatalf("just before retry-after: %v, want limited", err)
			}
			c.Add(time.Nanosecond)
			if err := l.Allow(ctx, "demo", "agent-1", tc.kind); err != nil {
				t.Fatalf("at retry-after: %v", err)
			}
		})
	}
}

// TestSharedAcrossProcesses: two limiters on two connections (as two
// worker processes) share the counters; together they allow exactly the
// limit, concurrently.
func TestSharedAcrossProcesses(t *testing.T) {
	c := &clock{t: time.Date(2027, 1, 10, 9, 0, 30, 0, time.UTC)}
	ctx := context.Background()
	ls := newLimiters(t, 2, c.Now, func(p string) ratelimit.Limits {
		if p == "small" {
			return ratelimit.Limits{CallsPerMinute: 5, HEMPerHour: 2, NotificationsPerHour: -1}
		}
		return ratelimit.Limits{}
	})
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
			case errors.As(err, &lim) && lim.Limit == "calls_per_minute" && lim.RetryAfterSeconds == 60:
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
	c.Add(30 * time.Second) // a fixed window would start again at 9:01:00
	if err := ls[1].Allow(ctx, "demo", "agent-1", ratelimit.KindCall); !errors.Is(err, ratelimit.ErrLimited) {
		t.Fatalf("30 s later, across the minute boundary: %v, want limited", err)
	}
	c.Add(30 * time.Second) // the 60 calls leave the window
	if err := ls[1].Allow(ctx, "demo", "agent-1", ratelimit.KindCall); err != nil {
		t.Fatalf("a minute later: %v", err)
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

// BenchmarkAllow is one allowed call of one client: a read and a
// compare-and-set write of its counter (60 call times at most).
func BenchmarkAllow(b *testing.B) {
	c := &clock{t: time.Date(2027, 1, 10, 9, 0, 0, 0, time.UTC)}
	l := newLimiters(b, 1, c.Now, func(string) ratelimit.Limits { return ratelimit.Limits{} })[0]
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Add(time.Second) // 60 per minute: always exactly full
		if err := l.Allow(ctx, "demo", "agent-1", ratelimit.KindCall); err != nil {
			b.Fatal(err)
		}
	}
}
