package boltstore

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

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/boltfile"
)

// Errors of Open (the same values as internal/boltfile's, so errors.Is
// matches them whichever package opened the file). Errors of the Store
// methods wrap the cardstore sentinels.
var (
	// ErrLocked: another process (or another Store in this process) has the
	// data file open; bbolt allows one writer per file.
	ErrLocked = boltfile.ErrLocked
	// ErrSchemaVersion: the file was written by a version of boltstore with
	// another layout, or is a bbolt file of some other program.
	ErrSchemaVersion = boltfile.ErrSchemaVersion
)

// schemaVersion is the layout described in the package documentation.
// Files of versions 1 to 3 are upgraded on open (upgrade.go).
const schemaVersion = "4"

// schemaVersion3 is the layout before the turnrecs bucket: a bucket of
// its own for each kind of a turn's records.
const schemaVersion3 = "3"

// schemaVersion2 is the layout before the outbox bucket.
const schemaVersion2 = "2"

// schemaVersion1 is the layout before the turn summary buckets.
const schemaVersion1 = "1"

// Bucket and meta key names; see the package documentation.
var (
	bucketCards  = []byte("cards")
	bucketBoxes  = []byte("boxes")
	bucketClaims = []byte("claims")
	bucketMeta   = []byte("meta")
	// Added in schema version 2: the lists of turns ListTurns reads.
	bucketTurnList   = []byte("turnlist")
	bucketAgentTurns = []byte("agentturns")
	// Added in schema version 3: the commands of calls without a result
	// (outbox.go).
	bucketOutbox = []byte("outbox")
	// Added in schema version 4: every record keyed by a turn (keys.go).
	bucketTurnRecs = []byte("turnrecs")
	allBuckets     = [][]byte{bucketCards, bucketBoxes, bucketClaims, bucketMeta,
		bucketTurnList, bucketAgentTurns, bucketOutbox, bucketTurnRecs}
)

// defaultOpenTimeout is how long Open waits for the file lock.
const defaultOpenTimeout = 5 * time.Second

// config is what the options set.
type config struct {
	maxCardBytes int
	clock        func() time.Time
	groupCommit  bool
	logger       *slog.Logger
	openTimeout  time.Duration
	observer     CommitObserver
	lockDelay    time.Duration // WithLockDelay
	linger       time.Duration // WithDispatchLinger
	resultHook   ResultHook    // WithResultHook; see shared.go
}

// CommitObserver is told about every committed write transaction, for
// metrics (pkg/metrics has a Prometheus implementation). Committed is
// called from the committing goroutine after the fsync, so it must be fast
// and must not block.
type CommitObserver = boltfile.CommitObserver

// WithCommitObserver reports every commit's latency and group size to o.
func WithCommitObserver(o CommitObserver) Option {
	return func(c *config) error {
		if o == nil {
			return fmt.Errorf("%w: WithCommitObserver(nil): an observer is required (omit the option to observe nothing)", cardstore.ErrInvalid)
		}
		c.observer = o
		return nil
	}
}

// Option configures Open. An option whose argument is out of range makes
// Open fail with an error wrapping cardstore.ErrInvalid.
type Option func(*config) error

// MaxDispatchLinger bounds WithDispatchLinger.
const MaxDispatchLinger = 100 * time.Millisecond

// WithDispatchLinger lets the commit of a dispatch's tool.call card
// (PutWithCommand) wait up to d for another write to share it. A call
// whose worker starts on the announced card (AnnouncePut) and answers
// within d has its card, its claim and its result in one commit instead
// of two; a call whose result comes later has its card committed d later
// (its dispatch is answered d later), and its result's commit may wait
// for the card's. Under load the committer is busy and the card rides
// with the next commit anyway. Zero (the default) commits the card at
// once; d must be between 0 and MaxDispatchLinger.
func WithDispatchLinger(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 || d > MaxDispatchLinger {
			return fmt.Errorf("%w: WithDispatchLinger(%v): must be between 0 and %v", cardstore.ErrInvalid, d, MaxDispatchLinger)
		}
		c.linger = d
		return nil
	}
}

// WithMaxCardBytes lowers the limit on one card's canonical encoding
// (default cardstore.DefaultMaxCardBytes, which is also the maximum: cards
// must fit in one NATS message). n must be positive.
func WithMaxCardBytes(n int) Option {
	return func(c *config) error {
		if n <= 0 || n > cardstore.DefaultMaxCardBytes {
			return fmt.Errorf("%w: WithMaxCardBytes(%d): must be between 1 and %d", cardstore.ErrInvalid, n, cardstore.DefaultMaxCardBytes)
		}
		c.maxCardBytes = n
		return nil
	}
}

// WithClock sets the store clock, which judges lease expiry and stamps box
// times (default time.Now). Tests use it to move time by hand.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("%w: WithClock(nil): a clock function is required", cardstore.ErrInvalid)
		}
		c.clock = now
		return nil
	}
}

// WithGroupCommit turns group commit on (the default) or off. Off, every
// write call runs its own bbolt transaction and fsync; it exists to measure
// what group commit gains.
func WithGroupCommit(enabled bool) Option {
	return func(c *config) error {
		c.groupCommit = enabled
		return nil
	}
}

// WithLogger sets where the store logs failed commits and recovered
// internal errors (Error level) and commit sizes (Debug level). The default
// discards everything.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil): a logger is required (use slog.New(slog.DiscardHandler) to discard)", cardstore.ErrInvalid)
		}
		c.logger = l
		return nil
	}
}

// WithOpenTimeout sets how long Open waits for the lock on a data file that
// another process holds before failing with ErrLocked (default 5s). d must
// be positive: waiting forever is never what a service wants.
func WithOpenTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithOpenTimeout(%v): must be positive", cardstore.ErrInvalid, d)
		}
		c.openTimeout = d
		return nil
	}
}

// Store is a cardstore.Store kept in one bbolt file. Create it with Open;
// every method is safe for concurrent use.
type Store struct {
	db   *bolt.DB
	cfg  config
	path string
	// commits runs every write transaction (group commit, see
	// internal/boltfile).
	commits *boltfile.Committer
	// closing is set by Close; reads check it without a lock.
	closing atomic.Bool
	// shared: db and commits belong to the caller (OpenShared).
	shared bool

	closeOnce sync.Once
	closeErr  error

	// mem holds the claims of call keys (memclaims.go); boots is what
	// Open learnt about the previous run (lockdelay.go).
	mem   *claimTable
	boots bootState
	// pending holds the announced Puts a StartCall waits for or starts
	// calls on (pending.go); awaitHook, set by tests, is called before
	// such a wait.
	pending   pendingPuts
	awaitHook func()
}

var _ cardstore.Store = (*Store)(nil)

// Open opens (creating it if needed, mode 0600) the store file at path.
// It fails with ErrLocked when another process has the file open, and with
// ErrSchemaVersion when the file has another layout.
func Open(path string, opts ...Option) (*Store, error) {
	cfg, err := configure("boltstore.Open", opts)
	if err != nil {
		return nil, err
	}
	if path == "" {
		return nil, fmt.Errorf("%w: boltstore.Open: path is required", cardstore.ErrInvalid)
	}
	db, err := boltfile.Open(path, boltfile.Options{Timeout: cfg.openTimeout, Schema: storeSchema(cfg.logger)})
	if err != nil {
		return nil, fmt.Errorf("boltstore: %w", err)
	}
	s := &Store{db: db, cfg: cfg, path: path, mem: newClaimTable()}
	if err := s.boot(); err != nil {
		_ = db.Close()
		return nil, err
	}
	s.commits = boltfile.NewCommitter(db, boltfile.CommitConfig{
		Alone: !cfg.groupCommit, Observer: cfg.observer, Logger: cfg.logger, Name: path,
	})
	return s, nil
}

// configure applies opts to the defaults, for the opener named in errors.
func configure(opener string, opts []Option) (config, error) {
	cfg := config{
		maxCardBytes: cardstore.DefaultMaxCardBytes,
		clock:        time.Now,
		groupCommit:  true,
		logger:       slog.New(slog.DiscardHandler),
		openTimeout:  defaultOpenTimeout,
		lockDelay:    DefaultLockDelay,
	}
	for i, o := range opts {
		if o == nil {
			return cfg, fmt.Errorf("%w: %s: option %d is nil", cardstore.ErrInvalid, opener, i)
		}
		if err := o(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// Close commits every write request queued before it (in-memory claims
// included) and, when no claim is left only in memory, records a clean
// close (so the next Open needs no lock-delay), then closes the file.
// Later calls of any method fail with cardstore.ErrClosed. Close is
// idempotent: every call returns the first call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		s.mem.close()
		if s.shared {
			// The file and its committer are the caller's (OpenShared):
			// drain the claims kept in memory through a write of our own
			// (it takes every queued Later write with it), then record
			// the clean close.
			if err := s.commits.Write(context.Background(), 0, func(*bolt.Tx) error { return nil }); err != nil {
				s.closeErr = fmt.Errorf("boltstore: close %s: %w", s.path, err)
				return
			}
			if err := s.markClean(); err != nil {
				s.closeErr = fmt.Errorf("boltstore: close %s: %w", s.path, err)
			}
			return
		}
		s.commits.Close() // every accepted write has its answer
		if err := s.markClean(); err != nil {
			s.closeErr = fmt.Errorf("boltstore: close %s: %w", s.path, err)
		}
		if err := s.db.Close(); err != nil && s.closeErr == nil {
			s.closeErr = fmt.Errorf("boltstore: close %s: %w", s.path, err)
		}
	})
	return s.closeErr
}

// DB returns the underlying bbolt database, for consistency checks
// (tx.Check) and hot backups (tx.WriteTo) in read-only transactions.
// Writing to it bypasses every rule of the store; don't.
func (s *Store) DB() *bolt.DB { return s.db }

// buckets are the store's buckets within one transaction.
type buckets struct {
	cards, boxes, claims *bolt.Bucket
	// recs holds every record keyed by a turn: its cards' index, its
	// summary, its calls' results and claims (keys.go).
	recs                 *bolt.Bucket
	turnList, agentTurns *bolt.Bucket
	outbox               *bolt.Bucket
	// calls is set by writeCalls: the claim table of the request's run.
	calls *callTx
}

// openBuckets returns the buckets of tx; Open made sure they exist, so an
// error here means someone changed the file behind the store's back.
func openBuckets(tx *bolt.Tx) (*buckets, error) {
	b := &buckets{
		cards:  tx.Bucket(bucketCards),
		boxes:  tx.Bucket(bucketBoxes),
		claims: tx.Bucket(bucketClaims),
		recs:   tx.Bucket(bucketTurnRecs),

		turnList:   tx.Bucket(bucketTurnList),
		agentTurns: tx.Bucket(bucketAgentTurns),
		outbox:     tx.Bucket(bucketOutbox),
	}
	if b.cards == nil || b.boxes == nil || b.claims == nil || b.recs == nil ||
		b.turnList == nil || b.agentTurns == nil || b.outbox == nil {
		return nil, errors.New("boltstore: a bucket is missing from the data file (was it modified through DB()?)")
	}
	return b, nil
}

// view runs a read-only transaction.
func (s *Store) view(fn func(b *buckets) error) error {
	if s.closing.Load() {
		return cardstore.ErrClosed
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := openBuckets(tx)
		if err != nil {
			return err
		}
		return fn(b)
	})
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return fmt.Errorf("%w: %w", cardstore.ErrClosed, err)
	}
	return err
}

// checkCtx is the first thing every method does.
func checkCtx(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: context is nil", cardstore.ErrInvalid)
	}
	return ctx.Err()
}
