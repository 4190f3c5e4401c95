// Package gopool runs functions on goroutines that it keeps for a while
// after they finish, so that the next function runs on one of them.
//
// The mesh's request handlers (a service request, a tool command's
// delivery, an admission's command publish, a wakeup) each ran on a new
// goroutine, which starts with a small stack and grows it by copying, a
// doubling at a time, as the handler goes down through JSON, bbolt and
// nats.go: about 4 % of the CPU of a busy `utpmesh up` (docs/performance.md).
// A kept goroutine has its stack grown already, until the garbage
// collector shrinks the stack of one that has been idle.
//
// A Pool does not bound concurrency: Go never waits for a free goroutine
// (it starts one when none is idle), so callers bound concurrency as they
// did with the go statement. A function that panics crashes the process,
// as on any goroutine.
package gopool

import (
	"sync/atomic"
	"time"
)

// DefaultIdle is how long a goroutine of the default pool waits for more
// work before it exits.
const DefaultIdle = 10 * time.Second

// Pool keeps goroutines for reuse. The zero Pool is not usable; create
// one with New.
type Pool struct {
	work          chan func()
	idle          time.Duration
	live, waiting atomic.Int64 // goroutines running or idle; idle ones (for tests)
}

// New returns a Pool whose goroutines exit after idle without work
// (DefaultIdle when idle <= 0).
func New(idle time.Duration) *Pool {
	if idle <= 0 {
		idle = DefaultIdle
	}
	return &Pool{work: make(chan func()), idle: idle}
}

var std = New(DefaultIdle)

// Go runs fn on a goroutine of the process's default pool.
func Go(fn func()) { std.Go(fn) }

// Go runs fn on an idle goroutine of p, or on a new one when none is
// idle. It does not wait for fn.
func (p *Pool) Go(fn func()) {
	select {
	case p.work <- fn:
	default:
		p.live.Add(1)
		go p.run(fn)
	}
}

func (p *Pool) run(fn func()) {
	defer p.live.Add(-1)
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		fn()
		fn = nil // let the finished function's captures be collected while idle
		t.Reset(p.idle)
		p.waiting.Add(1)
		select {
		case fn = <-p.work:
			p.waiting.Add(-1)
		case <-t.C:
			p.waiting.Add(-1)
			return
		}
	}
}
