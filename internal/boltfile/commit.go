package boltfile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrClosed: the Committer (or its file) is closed.
var ErrClosed = errors.New("boltfile: closed")

// Default limits on one group-commit transaction. The first queued request
// is always taken, whatever its size.
const (
	// DefaultMaxRequests is the most write requests one transaction carries.
	DefaultMaxRequests = 256
	// DefaultMaxBytes stops adding requests once their payload reaches it,
	// so one transaction does not grow without bound under a flood of
	// large writes.
	DefaultMaxBytes = 16 << 20
	// DefaultLaterDelay is the longest a Later write waits for another
	// write to share a transaction with before it commits alone.
	DefaultLaterDelay = 100 * time.Millisecond
)

// ApplyFunc performs one write request inside a shared transaction.
//
// It must check everything that can fail before it writes anything: an
// error it returns before its first write (a conflict, a held claim) fails
// only this request and leaves the transaction clean. An error after its
// first write must be wrapped with Dirty, so the committer throws the
// transaction away and runs the other requests again without this one. It
// may run more than once (after such a retry), so it sets its outputs anew
// on every run.
type ApplyFunc func(tx *bolt.Tx) error

// writeFailure marks an error that happened after a request started
// writing: its transaction holds partial writes.
type writeFailure struct{ err error }

func (w *writeFailure) Error() string { return w.err.Error() }
func (w *writeFailure) Unwrap() error { return w.err }

// Dirty marks err as a failure after the request began writing.
func Dirty(err error) error { return &writeFailure{err} }

// CommitObserver is told about every committed write transaction, for
// metrics. Committed is called from the committing goroutine after the
// fsync, so it must be fast and must not block.
type CommitObserver interface {
	// Committed: one bbolt transaction carrying requests write requests
	// (the group size; 1 without group commit) committed and fsync'd in d.
	Committed(requests int, d time.Duration)
}

// CommitConfig configures a Committer. The zero value is group commit on
// with the default limits, no observer and no logging.
type CommitConfig struct {
	// Alone turns group commit off: every write runs its own transaction
	// and fsync. It exists to measure what group commit gains.
	Alone bool
	// MaxRequests and MaxBytes bound one transaction; zero means
	// DefaultMaxRequests and DefaultMaxBytes.
	MaxRequests, MaxBytes int
	// LaterDelay bounds how long a Later write waits for company; zero
	// means DefaultLaterDelay.
	LaterDelay time.Duration
	// Observer, when set, is told about every commit.
	Observer CommitObserver
	// Logger receives failed commits and recovered panics (Error) and
	// group sizes (Debug); nil discards them.
	Logger *slog.Logger
	// Name identifies the file in log records (its path).
	Name string
}

// Request states: a queued request is either started by the committer or
// abandoned by its caller, whichever comes first.
const (
	stateQueued int32 = iota
	stateStarted
	stateAbandoned
)

// request is one write call waiting for the committer.
type request struct {
	ctx   context.Context
	apply ApplyFunc
	size  int
	state atomic.Int32
	done  chan error      // buffered: the committer never blocks on it
	later func(err error) // set on a Later request instead of a waiter on done
	// due is when a request waiting for company (Later, WriteSoon)
	// commits without it.
	due time.Time
}

// reply hands a request its outcome.
func (r *request) reply(err error) {
	if r.later != nil {
		r.later(err)
		return
	}
	r.done <- err
}

// Committer runs the write transactions of one bbolt file. With group
// commit (the default) a writer that finds it idle commits its own request
// at once in its own goroutine (no batch delay: bbolt's db.Batch would wait
// up to 10 ms), and requests that arrive during a commit queue up and share
// the next transaction, committed by a goroutine of the Committer. Create
// it with NewCommitter; every method is safe for concurrent use.
type Committer struct {
	db  *bolt.DB
	cfg CommitConfig

	// mu guards closed, stopped, queue, later, busy, flush, timer, timerAt
	// and timerGen. A write
	// joins inflight under mu while closed is false, so Close, after it
	// sets closed, can wait for every accepted write.
	mu       sync.Mutex
	closed   bool
	stopped  bool // kick is closed
	inflight sync.WaitGroup
	queue    []*request    // requests waiting for the next transaction
	later    []*request    // Later and WriteSoon requests waiting for company
	timer    *time.Timer   // flushes later when its first request is due; nil when unarmed
	timerAt  time.Time     // when timer fires
	timerGen uint64        // counts armed timers: a stale one's callback does nothing
	busy     bool          // a commit is in flight or the committer is draining
	flush    bool          // commit Later requests even without company
	kick     chan struct{} // wakes the committer; capacity 1
	done     chan struct{}
}

// NewCommitter returns a Committer of db. Close it before closing db.
func NewCommitter(db *bolt.DB, cfg CommitConfig) *Committer {
	if cfg.MaxRequests <= 0 {
		cfg.MaxRequests = DefaultMaxRequests
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.LaterDelay <= 0 {
		cfg.LaterDelay = DefaultLaterDelay
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Committer{db: db, cfg: cfg, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go c.run()
	return c
}

// accept takes c.mu and counts a write in flight, unless the Committer is
// closed (then it returns false, c.mu not held). The caller unlocks c.mu
// and calls c.inflight.Done once the write has its answer.
func (c *Committer) accept() bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.inflight.Add(1)
	return true
}

// Write runs apply as one durable write: with group commit it joins the
// next shared transaction, otherwise it runs a transaction of its own. It
// returns apply's error, or nil once the transaction has been committed and
// fsync'd, or ctx.Err() if ctx ended before the request started. After
// Close it fails with ErrClosed.
func (c *Committer) Write(ctx context.Context, size int, apply ApplyFunc) error {
	if !c.accept() {
		return ErrClosed
	}
	defer c.inflight.Done()
	if c.cfg.Alone {
		c.mu.Unlock()
		return c.writeAlone(ctx, apply)
	}
	r := &request{ctx: ctx, apply: apply, size: size, done: make(chan error, 1)}
	if !c.busy {
		// Idle: commit this request at once, in the caller's goroutine (with
		// any Later requests waiting for company), so a lone writer pays no
		// goroutine hand-off. Requests arriving meanwhile queue up for the
		// committer goroutine.
		c.busy = true
		batch := append(c.takeLater(), r)
		c.mu.Unlock()
		c.commit(batch)
		c.mu.Lock()
		if len(c.queue) > 0 {
			c.kickLocked() // busy stays true: the committer drains the queue
		} else {
			c.idleLocked()
		}
		c.mu.Unlock()
		return <-r.done
	}
	c.queue = append(c.queue, r)
	c.mu.Unlock()
	return r.wait()
}

// wait returns the outcome of a queued request, or ctx.Err() when its
// context ends before the committer started it.
func (r *request) wait() error {
	select {
	case err := <-r.done:
		return err
	case <-r.ctx.Done():
		if r.state.CompareAndSwap(stateQueued, stateAbandoned) {
			return r.ctx.Err() // the committer will skip it
		}
		return <-r.done // already in a transaction: it completes
	}
}

// WriteSoon is Write for a write that may wait up to delay for another
// write to share its transaction: it waits for company as Later's
// requests do, is applied first in the next transaction whoever starts
// it, and commits alone once delay has passed. Like Write it returns once
// its transaction is durable (or apply failed, or ctx ended before the
// request started). It trades up to delay of this write's latency for one
// commit fewer when a write that follows it soon would otherwise wait for
// its commit to end. A zero or negative delay (or CommitConfig.Alone) is
// Write.
func (c *Committer) WriteSoon(ctx context.Context, size int, delay time.Duration, apply ApplyFunc) error {
	if delay <= 0 || c.cfg.Alone {
		return c.Write(ctx, size, apply)
	}
	if !c.accept() {
		return ErrClosed
	}
	defer c.inflight.Done()
	r := &request{ctx: ctx, apply: apply, size: size, done: make(chan error, 1), due: time.Now().Add(delay)}
	c.later = append(c.later, r)
	if !c.busy {
		c.armLocked()
	} // else the running commit's end takes it along or arms the timer
	c.mu.Unlock()
	return r.wait()
}

// Waiting returns how many Later and WriteSoon requests wait for
// company, for metrics and tests.
func (c *Committer) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.later)
}

// Queued returns how many Write requests wait for the next transaction
// (Later ones not counted), for metrics and tests.
func (c *Committer) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// Later queues apply to ride along with the next transaction, whoever
// starts it, and calls done with its outcome once that transaction is
// committed (or apply failed). It commits alone after LaterDelay if no
// other write comes. Later is for writes whose durability nobody waits
// for: a crash before the commit loses them. done runs on the committing
// goroutine and must be fast; it is always called, with ErrClosed when the
// Committer was already closed.
func (c *Committer) Later(size int, apply ApplyFunc, done func(err error)) {
	if done == nil {
		done = func(error) {}
	}
	if !c.accept() {
		done(ErrClosed)
		return
	}
	r := &request{ctx: context.Background(), apply: apply, size: size, due: time.Now().Add(c.cfg.LaterDelay),
		later: func(err error) { done(err); c.inflight.Done() }}
	if c.cfg.Alone {
		c.mu.Unlock()
		r.state.Store(stateStarted)
		go func() { r.reply(c.writeAlone(r.ctx, apply)) }()
		return
	}
	c.later = append(c.later, r)
	if !c.busy {
		c.armLocked()
	} // else the running commit's end takes it along or arms the timer
	c.mu.Unlock()
}

// armLocked makes the timer fire when the first waiting request is due;
// c.mu is held.
func (c *Committer) armLocked() {
	var first time.Time
	for _, r := range c.later {
		if first.IsZero() || r.due.Before(first) {
			first = r.due
		}
	}
	if first.IsZero() {
		return
	}
	if c.timer != nil {
		if !first.Before(c.timerAt) {
			return
		}
		c.timer.Stop()
	}
	c.timerGen++
	gen := c.timerGen
	c.timerAt = first
	c.timer = time.AfterFunc(time.Until(first), func() { c.flushLater(gen) })
}

// idleLocked marks the Committer idle after a commit found the queue
// empty; Later requests left over wait for company again. c.mu is held.
func (c *Committer) idleLocked() {
	if len(c.later) > 0 && c.flush {
		c.kickLocked() // closing: busy stays true, the committer takes them
		return
	}
	c.busy = false
	if len(c.later) > 0 {
		c.armLocked()
	}
}

// flushLater commits the Later requests that found no company.
func (c *Committer) flushLater(gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.timerGen {
		return // stopped and replaced, but it had fired already
	}
	c.timer = nil
	if c.stopped || len(c.later) == 0 || c.busy {
		return // a running commit takes them along or re-arms the timer
	}
	c.busy, c.flush = true, true
	c.kickLocked()
}

// takeLater removes the requests waiting for company; c.mu is held.
func (c *Committer) takeLater() []*request {
	l := c.later
	c.later = nil
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
		c.timerGen++
	}
	return l
}

// kickLocked wakes the committer goroutine; c.mu is held. A kick that
// finds one already pending is dropped: the committer will run anyway.
func (c *Committer) kickLocked() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Close commits every write accepted before it (Later ones included) and
// stops the committer goroutine. It does not close the file. Later writes
// fail with ErrClosed. Close is idempotent.
func (c *Committer) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.done
		return
	}
	c.closed = true
	c.flush = true // from now on nothing waits for company
	if len(c.later) > 0 && !c.busy {
		c.busy = true
		c.kickLocked()
	}
	c.mu.Unlock()
	c.inflight.Wait() // every accepted write has its answer
	c.mu.Lock()
	c.stopped = true
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	close(c.kick) // the committer finishes its drain, then exits
	c.mu.Unlock()
	<-c.done
}

// writeAlone is Write without group commit: one bbolt transaction (and
// fsync) per call. bbolt serialises the transactions.
func (c *Committer) writeAlone(ctx context.Context, apply ApplyFunc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var reqErr error
	start := time.Now()
	err := c.db.Update(func(tx *bolt.Tx) error {
		reqErr = c.runApply(apply, tx)
		return reqErr
	})
	if err == nil && c.cfg.Observer != nil {
		c.cfg.Observer.Committed(1, time.Since(start))
	}
	if reqErr != nil {
		var wf *writeFailure
		if errors.As(reqErr, &wf) {
			return wf.err
		}
		return reqErr
	}
	if err != nil {
		return c.commitFailed(1, err)
	}
	return nil
}

// commitFailed logs a failed commit and returns the error its requests get.
func (c *Committer) commitFailed(n int, err error) error {
	c.cfg.Logger.Error("boltfile: commit failed", "path", c.cfg.Name, "requests", n, "err", err)
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return fmt.Errorf("commit of %d write requests: %w", n, err)
}

// runApply runs apply in tx and turns a panic into a write failure, so a
// bug in one request cannot take the process (or the other requests of the
// transaction) down with it.
func (c *Committer) runApply(apply ApplyFunc, tx *bolt.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			c.cfg.Logger.Error("boltfile: internal error in write request", "path", c.cfg.Name, "panic", p)
			err = Dirty(fmt.Errorf("internal error: %v", p))
		}
	}()
	return apply(tx)
}

// run is the committer goroutine. Once kicked it commits what is queued
// (each transaction takes the Later requests and then everything queued,
// up to MaxRequests / MaxBytes) until nothing is, and the Committer is
// idle again. It returns when Close closes the kick channel.
func (c *Committer) run() {
	defer close(c.done)
	for range c.kick {
		for {
			c.mu.Lock()
			if len(c.queue) == 0 && (len(c.later) == 0 || !c.flush) {
				c.idleLocked()
				c.mu.Unlock()
				break
			}
			c.flush = c.closed
			batch := c.takeBatch()
			c.mu.Unlock()
			c.commit(batch)
		}
	}
}

// takeBatch removes the next transaction's requests; c.mu is held and
// something is queued. The first request is always taken.
func (c *Committer) takeBatch() []*request {
	batch := c.takeLater()
	n, size := 0, 0
	for _, r := range batch {
		size += r.size
	}
	for n < len(c.queue) && len(batch)+n < c.cfg.MaxRequests && (len(batch)+n == 0 || size < c.cfg.MaxBytes) {
		size += c.queue[n].size
		n++
	}
	batch = append(batch, c.queue[:n]...)
	if n == len(c.queue) {
		c.queue = nil
	} else {
		c.queue = append([]*request(nil), c.queue[n:]...)
	}
	return batch
}

// commit runs the requests of batch in one transaction and reports to each
// once it is durable.
func (c *Committer) commit(batch []*request) {
	live := make([]*request, 0, len(batch))
	for _, r := range batch {
		if !r.state.CompareAndSwap(stateQueued, stateStarted) {
			continue // its caller gave up; nobody waits for it
		}
		if err := r.ctx.Err(); err != nil {
			r.reply(err)
			continue
		}
		live = append(live, r)
	}
	errs := make([]error, len(live))
	for len(live) > 0 {
		bad := -1
		start := time.Now()
		err := c.db.Update(func(tx *bolt.Tx) error {
			for i, r := range live {
				err := c.runApply(r.apply, tx)
				var wf *writeFailure
				if errors.As(err, &wf) {
					bad, errs[i] = i, wf.err
					return err // roll back: the transaction holds part of r
				}
				errs[i] = err
			}
			return nil
		})
		if bad >= 0 {
			// Fail the request that broke the transaction alone and run
			// the others again in a fresh one.
			live[bad].reply(errs[bad])
			live = append(live[:bad], live[bad+1:]...)
			errs = errs[:len(live)]
			continue
		}
		if err != nil {
			err = c.commitFailed(len(live), err)
			for _, r := range live {
				r.reply(err)
			}
			return
		}
		if c.cfg.Observer != nil {
			c.cfg.Observer.Committed(len(live), time.Since(start))
		}
		if c.cfg.Logger.Enabled(context.Background(), slog.LevelDebug) {
			c.cfg.Logger.Debug("boltfile: committed", "path", c.cfg.Name, "requests", len(live))
		}
		for i, r := range live {
			r.reply(errs[i])
		}
		return
	}
}
