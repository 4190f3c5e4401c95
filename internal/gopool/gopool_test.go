package gopool_test

import (
	"sync"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/gopool"
)

// TestRunsEveryFunction: functions given while every goroutine is busy
// start goroutines of their own and all run, concurrently.
func TestRunsEveryFunction(t *testing.T) {
	p := gopool.New(time.Minute)
	const n = 50
	release := make(chan struct{})
	var started, done sync.WaitGroup
	started.Add(n)
	done.Add(n)
	for range n {
		p.Go(func() {
			started.Done()
			<-release // every function holds its goroutine until all started
			done.Done()
		})
	}
	started.Wait()
	if got := p.Live(); got != n {
		t.Fatalf("%d goroutines for %d concurrent functions, want %d", got, n, n)
	}
	close(release)
	done.Wait()
}

// TestReusesIdleGoroutines: functions given one after another, each once
// the last goroutine is idle, run on the goroutine the first one started.
func TestReusesIdleGoroutines(t *testing.T) {
	p := gopool.New(time.Minute)
	for i := range 100 {
		ran := make(chan struct{})
		p.Go(func() { close(ran) })
		<-ran
		for deadline := time.Now().Add(10 * time.Second); p.Idle() != 1; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after %d functions: %d idle goroutines, want 1", i+1, p.Idle())
			}
		}
		if got := p.Live(); got != 1 {
			t.Fatalf("after %d functions in sequence: %d goroutines, want 1", i+1, got)
		}
	}
}

// TestIdleGoroutinesExit: a goroutine without work for the idle time
// exits.
func TestIdleGoroutinesExit(t *testing.T) {
	p := gopool.New(10 * time.Millisecond)
	var wg sync.WaitGroup
	wg.Add(3)
	for range 3 {
		p.Go(wg.Done)
	}
	wg.Wait()
	for deadline := time.Now().Add(10 * time.Second); p.Live() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines still live long after the idle time", p.Live())
		}
	}
}

// TestDefaultPool: the package-level Go runs the function.
func TestDefaultPool(t *testing.T) {
	ran := make(chan struct{})
	gopool.Go(func() { close(ran) })
	<-ran
}
